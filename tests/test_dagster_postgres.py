"""Dagster's instance on Postgres when CRYPTOWIRE_DATABASE_URL is set: a run materialized by one process (the real
`cryptowire materialize`) is read back by another instance opened on the same Dagster home, from Postgres."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.jobs import dagster_postgres_url, dagster_yaml, prepare_dagster_home
from warehouse.config import Settings

PROJECT = Path(__file__).resolve().parents[1]


def test_without_database_url_the_instance_is_the_project_dagster_yaml(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRYPTOWIRE_DATABASE_URL", raising=False)
    settings = Settings(home=tmp_path / "home")
    home = prepare_dagster_home(settings)
    assert (home / "dagster.yaml").read_text() == (PROJECT / "dagster.yaml").read_text()
    assert "storage:" not in dagster_yaml(settings)


def test_with_database_url_runs_are_recorded_in_postgres(tmp_path: Path, postgres_url: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import dagster as dg
    import psycopg
    import yaml
    from dagster._core.instance.ref import InstanceRef

    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "DAGSTER_"))}
    env.update(PYTHONPATH=str(PROJECT), CRYPTOWIRE_HOME=str(home), CRYPTOWIRE_DATABASE_URL=postgres_url,
               CRYPTOWIRE_PRICE_SOURCE_URL="", CRYPTOWIRE_PDF_PREWARM="false")
    out = subprocess.run([sys.executable, "-m", "pipeline.cli", "materialize", "--select", "crypto_assets", "--json"],
                         env=env, cwd=PROJECT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    run_id = json.loads(out.stdout)["run_id"]

    config = yaml.safe_load((home / "dagster" / "dagster.yaml").read_text())
    assert config["storage"] == {"postgres": {"postgres_url": dagster_postgres_url(postgres_url)}}
    assert (home / "dagster" / "dagster.yaml").stat().st_mode & 0o077 == 0  # the URL may hold a password
    assert not (home / "dagster" / "history").exists()  # no SQLite run storage beside it

    # another instance (this process) on the same Dagster home reads the run back from Postgres
    instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home / "dagster")))
    try:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        run = instance.get_run_by_id(run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
        mats = instance.fetch_materializations(dg.AssetKey("crypto_assets"), limit=1).records
        assert mats and mats[0].run_id == run_id
    finally:
        instance.dispose()
    with psycopg.connect(postgres_url) as con:
        assert con.execute("SELECT status FROM runs WHERE run_id = %s", [run_id]).fetchall() == [("SUCCESS",)]
