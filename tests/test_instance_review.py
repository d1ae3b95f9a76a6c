"""The operator commands on a data home whose Dagster instance is in Postgres: a server that is down is a one-line
error (JSON under --json), a missing or different CRYPTOWIRE_DATABASE_URL never switches the instance nor rewrites
its dagster.yaml, and an empty CRYPTOWIRE_PRICE_SOURCE_URL turns the price fetch off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.jobs import InstanceError, open_instance, prepare_dagster_home
from tests.support.servers import POSTGRES_MISSING, postgres_server
from warehouse.config import Settings

PROJECT = Path(__file__).resolve().parents[1]
SECRET = "s3cret-pw"


def with_password(url: str) -> str:
    # the test server trusts every login: the password is only there to check it is never printed
    return url.replace("postgres@", f"postgres:{SECRET}@", 1)


def cli(home: Path, database_url: str | None, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "DAGSTER_"))}
    env.update(PYTHONPATH=str(PROJECT), CRYPTOWIRE_HOME=str(home), CRYPTOWIRE_PRICE_SOURCE_URL="",
               CRYPTOWIRE_PDF_PREWARM="false", CRYPTOWIRE_DATABASE_URL=database_url or "")
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], env=env, cwd=PROJECT, capture_output=True,
                         text=True, timeout=120)
    return out, time.monotonic() - start


@pytest.fixture
def stopped_postgres(tmp_path: Path) -> tuple[Path, str]:
    """A data home whose Dagster instance was created in a real Postgres that is now stopped."""
    if POSTGRES_MISSING:
        pytest.skip(POSTGRES_MISSING)
    home = tmp_path / "home"
    with postgres_server(tmp_path / "postgres") as url:
        url = with_password(url)
        open_instance(Settings(home=home, database_url=url)).dispose()
    return home, url


@pytest.mark.parametrize("args", [["status", "--json"], ["doctor", "--check", "--json"], ["materialize", "--json"]])
def test_postgres_down_is_one_line_error(stopped_postgres: tuple[Path, str], args: list[str]) -> None:
    home, url = stopped_postgres
    out, took = cli(home, url, *args)
    assert out.returncode == 1
    assert took < 10  # Dagster's own retries took ~13 s
    assert "Traceback" not in out.stderr and SECRET not in out.stdout + out.stderr
    port = url.rsplit(":", 1)[1].split("/")[0]
    doc = json.loads(out.stdout)
    error = doc["runs_error"] if args[0] == "status" else doc["error"]
    assert f"127.0.0.1:{port}/postgres" in error and "CRYPTOWIRE_DATABASE_URL" in error
    if args[0] == "status":  # the warehouse part is still there
        assert doc["serving"]["current"] is None and "home" in doc
    else:
        assert doc["exitCode"] == 1 and len(out.stderr.strip().splitlines()) == 1


def test_status_text_replaces_the_runs_part_with_the_error(stopped_postgres: tuple[Path, str]) -> None:
    home, url = stopped_postgres
    out, _ = cli(home, url, "status")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "runs: UNAVAILABLE, cannot reach the Dagster instance's Postgres at 127.0.0.1:" in out.stdout


@pytest.mark.parametrize("other", [None, "postgresql://postgres:x@db.example:5432/cryptowire"])
def test_a_postgres_instance_is_never_switched_nor_rewritten(tmp_path: Path, other: str | None) -> None:
    home = tmp_path / "home"
    url = with_password("postgresql://postgres@127.0.0.1:5999/dagster")
    prepare_dagster_home(Settings(home=home, database_url=url))
    written = (home / "dagster" / "dagster.yaml").read_text()
    for args in (["status", "--json"], ["doctor", "--check", "--json"], ["materialize", "--json"]):
        out, _ = cli(home, other, *args)
        assert out.returncode == 1, args
        doc = json.loads(out.stdout)
        error = doc.get("runs_error") or doc["error"]
        assert "Postgres at 127.0.0.1:5999/dagster" in error and "CRYPTOWIRE_DATABASE_URL" in error
        assert SECRET not in out.stdout + out.stderr and "Traceback" not in out.stderr
        assert (home / "dagster" / "dagster.yaml").read_text() == written, args


def test_read_only_leaves_dagster_yaml_as_written(tmp_path: Path) -> None:
    home = tmp_path / "home"
    prepare_dagster_home(Settings(home=home))  # SQLite
    written = (home / "dagster" / "dagster.yaml").read_text()
    prepare_dagster_home(Settings(home=home, database_url="postgresql://u@127.0.0.1:5999/d"), write=False)
    assert (home / "dagster" / "dagster.yaml").read_text() == written
    prepare_dagster_home(Settings(home=home, database_url="postgresql://u@127.0.0.1:5999/d"))  # moves to Postgres
    with pytest.raises(InstanceError, match="is unset"):
        prepare_dagster_home(Settings(home=home), write=False)


def test_status_on_a_running_postgres_instance(tmp_path: Path, postgres_url: str) -> None:
    home = tmp_path / "home"
    url = with_password(postgres_url)
    open_instance(Settings(home=home, database_url=url)).dispose()
    out, _ = cli(home, url, "status", "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert "runs_error" not in doc and {a["last_materialized"] for a in doc["assets"]} == {None}


def test_empty_price_source_url_turns_fetching_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRYPTOWIRE_PRICE_SOURCE_URL", "")
    assert Settings().price_source_url == ""
    assert Settings(price_source_url="http://127.0.0.1:1/api").price_source_url == "http://127.0.0.1:1/api"
    monkeypatch.delenv("CRYPTOWIRE_PRICE_SOURCE_URL")
    assert Settings().price_source_url.startswith("https://api.coingecko.com")


def test_a_rotated_password_is_the_same_instance(tmp_path: Path) -> None:
    """Same host, port and database with other credentials or options: accepted, and the file follows."""
    home = tmp_path / "home"
    prepare_dagster_home(Settings(home=home, database_url="postgresql://u:old@127.0.0.1:5999/d"))
    prepare_dagster_home(Settings(home=home, database_url="postgresql://u:new@127.0.0.1:5999/d?sslmode=prefer"))
    text = (home / "dagster" / "dagster.yaml").read_text()
    assert "new" in text and "old" not in text
