"""`cryptowire daemon` / `webserver` / `dev` with CRYPTOWIRE_DATABASE_URL naming a Postgres nobody listens on: one
`error:` line saying what is wrong and what to do, exit 1, at once (not Dagster's ~14 s of retries and three
tracebacks), like `materialize`, `status` and `doctor`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.servers import free_port

PROJECT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", ["daemon", "webserver"])
def test_an_unreachable_postgres_is_one_error_line(tmp_path: Path, command: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYPTOWIRE_", "DAGSTER_"))}
    port = free_port()  # nothing listens there
    env.update(PYTHONPATH=str(PROJECT), CRYPTOWIRE_HOME=str(tmp_path / "home"),
               CRYPTOWIRE_DATABASE_URL=f"postgresql://cw:secret@127.0.0.1:{port}/cw")
    args = [sys.executable, "-m", "pipeline.cli", command]
    if command == "webserver":
        args += ["--port", str(free_port())]
    started = time.monotonic()
    try:
        out = subprocess.run(args, env=env, cwd=PROJECT, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as exc:  # it became Dagster and kept running
        pytest.fail(f"still running after 60 s: {exc.stderr!r}")
    seconds = time.monotonic() - started
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr + out.stdout, out.stderr[-3000:]
    assert len(errors) == 1 and len(out.stderr.strip().splitlines()) == 1, out.stderr[-3000:]
    assert f"127.0.0.1:{port}" in errors[0] and "CRYPTOWIRE_DATABASE_URL" in errors[0], errors
    assert "start that server" in errors[0] and "secret" not in out.stderr + out.stdout
    assert seconds < 10, f"took {seconds:.1f} s"


def test_readyz_names_the_postgres_store_that_did_not_answer(tmp_path: Path, postgres_url: str) -> None:
    """The platform store on Postgres, no Redis: with Postgres stopped, /readyz names Postgres, not Redis."""
    import httpx

    from api.app import create_app
    from tests.support.apiserver import ApiServer
    from tests.support.newsdata import Data, build, make_articles, make_events
    from tests.test_outage_review import pg_ctl, wait_for
    from warehouse.config import Settings

    home = tmp_path / "home"
    build(home, Data(make_articles(5, 2), make_events(2)))
    settings = Settings(home=home, redis_url=None, database_url=postgres_url, pdf_prewarm=False)
    with ApiServer(create_app(settings)) as srv:
        ready = srv.url("/readyz")
        assert wait_for(ready, 200).status_code == 200
        pg_ctl(tmp_path, postgres_url, "stop")
        try:
            r = wait_for(ready, 503)
            assert r.status_code == 503, r.text
            reason = r.json()["reason"]
            assert "Postgres" in reason and "Redis" not in reason, reason
            # later probes, while the first one's connect attempt still runs, keep naming it
            time.sleep(2.5)
            reason = httpx.get(ready, timeout=10).json()["reason"]
            assert "Postgres" in reason and "Redis" not in reason, reason
        finally:
            pg_ctl(tmp_path, postgres_url, "start")
        assert wait_for(ready, 200).status_code == 200
