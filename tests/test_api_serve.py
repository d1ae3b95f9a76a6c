"""`cryptowire serve`: a real uvicorn process whose access log never shows an access key."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from pipeline.commands.serve import RedactAccessKeys, redact_path
from tests.support.apiserver import free_port
from tests.support.newsdata import Data, build, make_articles, make_events
from tests.support.servers import wait_serving

PROJECT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "given,expected",
    [
        ("/crypto-news/cw_live_SECRET", "/crypto-news/***"),
        ("/prediction-events/cw_live_SECRET/", "/prediction-events/***"),
        ("/api/usage/cw_live_SECRET?days=7", "/api/usage/***?***"),
        ("/pdf/cw_live_SECRET", "/***"),
        ("/healthz", "/healthz"),
        ("/readyz?x=1", "/readyz?***"),
        ("/assets/graphiql/graphiql.min.js", "/assets/graphiql/graphiql.min.js"),
        ("/cw_live_SECRET", "/***"),
        # more after the key, a key cut by an encoded slash, a key sent to a wrong endpoint: none of it shows
        ("/crypto-news/cw_live_SECRET/graphql", "/crypto-news/***"),
        ("/api/html-to-pdf/cw_live_SECRET/x?url=y", "/api/html-to-pdf/***?***"),
        ("/crypto-news/cw_live_SE/CRET", "/crypto-news/***"),
        ("/crypto-newz/cw_live_SECRET", "/***"),
        ("/static/cw_live_SECRET", "/***"),
        ("/assets/cw_live_SECRET", "/***"),
        ("/crypto-news", "/crypto-news"),
        ("/api/usage/", "/api/usage/"),
    ],
)
def test_redact_path(given: str, expected: str) -> None:
    assert redact_path(given) == expected


def test_filter_rewrites_uvicorn_access_records() -> None:
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5000", "POST", "/crypto-news/cw_live_SECRET", "1.1", 200), None)
    assert RedactAccessKeys().filter(record) is True
    assert "SECRET" not in record.getMessage() and "/crypto-news/***" in record.getMessage()


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_serve_runs_the_app_and_redacts_keys_from_the_access_log(tmp_path: Path, log_format: str) -> None:
    home = tmp_path / "home"
    build(home, Data(make_articles(30, 10), make_events(5)))
    port = free_port()
    from accounts import SqliteStore, load_plans

    store = SqliteStore(home / "platform.sqlite")
    store.sync_plans(load_plans().values())
    _, secret = store.create_key("serve test", "pro", ["news", "events"])
    store.close()
    env = {**os.environ, "CRYPTOWIRE_HOME": str(home), "CRYPTOWIRE_LOG_FORMAT": log_format}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        wait_serving(f"http://127.0.0.1:{port}/readyz", proc, 60, "cryptowire serve")
        for path in (f"/crypto-news/{secret}", f"/prediction-events/{secret}?k={secret}"):
            r = httpx.post(f"http://127.0.0.1:{port}{path}", json={"query": "{ cryptoNews(first: 1) { edges { cursor } } }"})
            assert r.status_code == 200, r.text
            assert secret not in r.text
        assert httpx.get(f"http://127.0.0.1:{port}/crypto-news/{secret}",
                         headers={"accept": "text/html"}).status_code == 200
        # more after the key: the 404 says where the key goes, and the log shows none of the path after the prefix
        r = httpx.post(f"http://127.0.0.1:{port}/crypto-news/{secret}/graphql", json={"query": "{ tickers }"})
        assert r.status_code == 404 and "last path segment" in r.json()["error"]["message"], r.text
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert secret not in out
    if log_format == "json":  # every line is one JSON object; the messages say what the text log says
        records = [json.loads(line) for line in out.splitlines() if line.strip()]
        assert all({"ts", "level", "logger", "message"} <= set(r) for r in records)
        out = "\n".join(r["message"] for r in records)
    assert '"POST /crypto-news/*** HTTP/1.1"' in out, out
    assert '"POST /prediction-events/***?*** HTTP/1.1"' in out
    assert '"GET /readyz HTTP/1.1" 200' in out
    assert '"POST /crypto-news/*** HTTP/1.1" 404' in out


def test_every_keyed_route_has_a_prefix_the_access_log_redacts(tmp_path: Path) -> None:
    from api.access import KEYED_PREFIXES
    from api.app import create_app
    from warehouse.config import Settings

    keyed = [r.path for r in create_app(Settings(home=tmp_path)).routes if "{accessKey}" in getattr(r, "path", "")]
    assert keyed and all(p.startswith(KEYED_PREFIXES) for p in keyed), keyed


def _printed_last(code: str, tmp_path: Path, without: tuple[str, ...] = ()) -> str:
    """The last line ``code`` prints in a new interpreter on an empty data home (the variables ``without`` unset)."""
    env = {**os.environ, "CRYPTOWIRE_HOME": str(tmp_path / "home")}
    for name in without:
        env.pop(name, None)
    result = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_the_app_loads_without_torch_dagster_or_matplotlib(tmp_path: Path) -> None:
    code = (
        "import sys; from api.app import create_app; create_app(); "
        "print([m for m in ('torch', 'transformers', 'dagster', 'pipeline', 'models', 'matplotlib') if m in sys.modules])"
    )
    assert _printed_last(code, tmp_path) == "[]"


def test_the_app_loads_only_the_read_side_of_the_warehouse(tmp_path: Path) -> None:
    """The API finds and reads snapshots (warehouse.published, warehouse.parts.read, warehouse.read): the code that
    writes the warehouse or publishes snapshots stays out of the server process."""
    code = (
        "import sys; from api.app import create_app; create_app(); "
        "print([m for m in ('warehouse.db', 'warehouse.publish', 'warehouse.crashpoints', 'warehouse.parts.build', "
        "'warehouse.parts.changes', 'warehouse.parts.contents', 'warehouse.parts.publish') if m in sys.modules])"
    )
    assert _printed_last(code, tmp_path) == "[]"


def test_the_serve_command_loads_nothing_it_does_not_use(tmp_path: Path) -> None:
    """The whole `cryptowire serve` path up to uvicorn (settings, key store, Redis check, app), not only the app:
    without CRYPTOWIRE_REDIS_URL no redis client is loaded either."""
    code = (
        "import sys, uvicorn; "
        "uvicorn.run = lambda app, **kw: print([m for m in ('torch', 'transformers', 'dagster', 'models', "
        "'matplotlib', 'celery', 'redis', 'polars') if m in sys.modules]); "
        "from pipeline.cli import main; sys.argv = ['cryptowire', 'serve', '--port', '8765']; main()"
    )
    assert _printed_last(code, tmp_path, without=("CRYPTOWIRE_REDIS_URL",)) == "[]"


def test_serve_refuses_a_bad_pdf_allow_entry_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "CRYPTOWIRE_HOME": str(tmp_path / "home"), "CRYPTOWIRE_PDF_ALLOW_HOSTS": '["not a host!"]'}
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "serve", "--port", "1"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: CRYPTOWIRE_PDF_ALLOW_HOSTS='[\"not a host!\"]': pdf_allow_hosts entry")
