"""The end of `cryptowire up`: a working access key, a ready-to-paste curl, then the server."""

from __future__ import annotations

import json
import shlex
from typing import Any

import typer

from warehouse.config import Settings

UP_KEY_NAME = "cryptowire up"
QUERY = "query CryptoNews($after: String, $first: Int) { cryptoNews(after: $after, first: $first) { pageInfo { hasNextPage endCursor } edges { node { title sentiment tickers topics sourceName newsUrl } } } }"


def cannot_listen(host: str, port: int) -> str | None:
    """Why nothing could listen on ``host:port`` now (``Address already in use``), or None."""
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn and Dagster's webserver bind
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def port_in_use(settings: Settings) -> str | None:
    """Why the API could not listen where settings say, or None. `up` asks before it materializes and before it
    revokes the previous `up` key: a server still running there would keep serving with that key revoked."""
    why = cannot_listen(settings.host, settings.port)
    if why is None:
        return None
    return (f"cannot listen on {settings.host}:{settings.port} ({why}): is another `cryptowire up` or `serve` still "
            "running there? Stop it, or set CRYPTOWIRE_PORT to a free port")


def local_key(settings: Settings) -> str:
    """A fresh key for this session (keys are stored hashed, so an old one cannot be shown again);
    the previous `cryptowire up` keys are revoked so they do not pile up."""
    from accounts import APIS, load_plans, open_synced_store

    plans = load_plans(settings.plans_file)
    store = open_synced_store(settings, plans.values())
    try:
        for row in store.keys():
            if row["name"] == UP_KEY_NAME and row["status"] == "active":
                store.revoke_key(row["id"])
        _, key = store.create_key(UP_KEY_NAME, "pro", list(APIS))
    finally:
        store.close()
    return key


def curl_example(settings: Settings, key: str) -> str:
    body = json.dumps({"query": QUERY, "variables": {"first": 5}})
    url = f"http://{settings.host}:{settings.port}/crypto-news/{key}"
    return f"curl -s {url} -H 'Content-Type: application/json' -d {shlex.quote(body)}"


def serve_after_up(settings: Settings, summary: dict[str, Any] | None = None) -> None:
    """Create a local key, say how to try the API, and serve. With ``summary`` (under --json) stdout gets one JSON
    document, the run's summary with a ``serving`` part holding the key; the lines for people go to stderr."""
    from pipeline.commands.output import emit_json
    from pipeline.commands.serve import run_server

    settings.ensure_dirs()
    key = local_key(settings)
    base = f"http://{settings.host}:{settings.port}"
    # a failed render answers JSON, which --fail-with-body writes into the output file: `cat` shows it
    pdf = (f"rm -f page.pdf; curl -sS --fail-with-body '{base}/api/html-to-pdf/{key}?url=https://example.com' "
           "-o page.pdf || { cat page.pdf 2>/dev/null; false; }")
    lines = ["", f"access key (pro plan, shown once): {key}", "try it:", "  " + curl_example(settings, key),
             f"GraphiQL: open {base}/crypto-news/{key} in a browser", f"PDF:      {pdf}", f"overview: {base}/", ""]
    if summary is not None:
        emit_json({**summary, "serving": {"url": base, "key": key, "plan": "pro", "graphql": f"{base}/crypto-news/{key}",
                                          "pdf": f"{base}/api/html-to-pdf/{key}", "overview": f"{base}/"}})
    for line in lines:
        typer.echo(line, err=summary is not None)
    run_server(settings.host, settings.port, log_format=settings.log_format, stdout_free=summary is not None)
