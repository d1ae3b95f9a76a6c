"""`cryptowire serve`: the API under uvicorn, with logs that never show an access key.

Every keyed route takes the key as its last path segment after a known prefix, so the access log replaces all that
follows the prefix with ``***`` (a client may put more after the key), every other path but a few keyless ones
with ``/***`` (a key sent to a wrong endpoint is still a key; under the keyless prefixes, a last segment shaped like
a key), and drops query strings. The filter sits on the ``uvicorn.access`` logger itself, so every handler
(console, JSON, files) only ever sees the redacted line. At ``--log-level trace`` uvicorn also logs each request's
ASGI scope (``uvicorn.asgi``): its ``path``, ``raw_path`` and ``query_string`` are redacted the same way. Last,
every handler replaces whatever follows ``cw_live_`` in any line, whichever logger wrote it.
"""

from __future__ import annotations

import copy
import logging
import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from accounts.keys import KEY_PREFIX  # stdlib only: cheap to import for the log filters

if TYPE_CHECKING:
    from api.metrics_shared import ServerDir
    from warehouse.config import Settings

REDACTED = "***"
KEYLESS_PATHS = frozenset({"/", "/healthz", "/readyz", "/metrics", "/favicon.ico"})
KEYLESS_PREFIXES = ("/assets/graphiql/",)  # the explorer's files (api.news.ASSETS): nothing else
KEY_SHAPED = re.compile(r"cw_live_[^\s/?&#'\"]*")


def redact_path(full_path: str) -> str:
    """``/crypto-news/cw_live_abc/x?y=1`` -> ``/crypto-news/***?***``; keyless paths stay as they are, and under
    the explorer's prefix only its own files (``/assets/graphiql/<anything else>`` -> ``/assets/graphiql/***``)."""
    from api.access import KEYED_PREFIXES

    path, sep, _query = str(full_path).partition("?")
    query = f"?{REDACTED}" if sep else ""
    if path in KEYLESS_PATHS:
        return path + query
    for prefix in KEYLESS_PREFIXES:
        if path.startswith(prefix):  # the explorer's own files as they are; anything else there may hold a key
            return (path if path[len(prefix):] in _explorer_files() else prefix + REDACTED) + query
    for prefix in KEYED_PREFIXES:
        if path.rstrip("/") == prefix.rstrip("/"):
            return path + query  # the endpoint without a key
        if path.startswith(prefix):
            return prefix + REDACTED + query
    return "/" + REDACTED + query


@lru_cache(maxsize=1)
def _explorer_files() -> frozenset[str]:
    import api

    return frozenset(p.name for p in (Path(api.__file__).parent / "static" / "graphiql").iterdir())


def _has_key(text: str) -> bool:
    """Whether ``text`` holds a key-shaped string not redacted yet."""
    return any(m.group() != KEY_PREFIX + REDACTED for m in KEY_SHAPED.finditer(text))


class RedactAccessKeys(logging.Filter):
    """Rewrites uvicorn access records: ``args = (client, method, path, http_version, status)``."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5:
            client, method, path, version, status = args
            record.args = (client, method, redact_path(path), version, status)
        return True


class RedactTraceScope(logging.Filter):
    """Rewrites uvicorn's trace records of a request's ASGI scope (``uvicorn.asgi``, ``--log-level trace``): the
    scope's ``path``, ``raw_path`` and ``query_string`` redacted as in the access log."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and any(isinstance(a, dict) and "path" in a for a in args):
            record.args = tuple(_redacted_scope(a) if isinstance(a, dict) and "path" in a else a for a in args)
        return True


def _redacted_scope(scope: dict[str, Any]) -> dict[str, Any]:
    out = dict(scope)
    path = redact_path(str(scope.get("path", ""))).partition("?")[0]
    out["path"] = path
    if "raw_path" in out:
        out["raw_path"] = path.encode()
    if out.get("query_string"):
        out["query_string"] = REDACTED.encode()
    return out


class RedactKeyShaped(logging.Filter):
    """On every handler: whatever follows ``cw_live_`` in a line is replaced (a key in a message that no filter
    above knows of: any logger, any level)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record: let the handler report it as it would
            return True
        if KEY_PREFIX not in message:
            return True
        # the arguments one by one first: formatters such as uvicorn's access formatter read them
        if isinstance(record.args, tuple):
            record.args = tuple(_scrub(a) for a in record.args)
        record.msg = _scrub(record.msg)
        try:
            if _has_key(record.getMessage()):  # in a dict's or an object's text: the line as a whole
                record.msg, record.args = KEY_SHAPED.sub(KEY_PREFIX + REDACTED, record.getMessage()), ()
        except Exception:  # noqa: BLE001
            record.msg, record.args = KEY_SHAPED.sub(KEY_PREFIX + REDACTED, message), ()
        return True


def _scrub(value: Any) -> Any:
    if isinstance(value, str) and KEY_PREFIX in value:
        return KEY_SHAPED.sub(KEY_PREFIX + REDACTED, value)
    return value


def log_config(fmt: str = "text", stdout_free: bool = False) -> dict[str, Any]:
    """uvicorn's logging config with the redacting filter on ``uvicorn.access``; ``fmt="json"`` writes one JSON
    object per line (CRYPTOWIRE_LOG_FORMAT=json). ``stdout_free``: the access log on stderr too (`up --json`
    keeps stdout for its one document)."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    if stdout_free:
        config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    if fmt == "json":
        for name in config["formatters"]:
            config["formatters"][name] = {"()": "warehouse.logs.JsonFormatter"}
        config["loggers"][""] = {"handlers": ["default"], "level": "INFO"}  # the app's own loggers too
    filters = config.setdefault("filters", {})
    filters["redact_keys"] = {"()": f"{__name__}.RedactAccessKeys"}
    filters["redact_scope"] = {"()": f"{__name__}.RedactTraceScope"}
    filters["redact_key_shaped"] = {"()": f"{__name__}.RedactKeyShaped"}
    config["loggers"]["uvicorn.access"]["filters"] = ["redact_keys"]
    config["loggers"].setdefault("uvicorn.asgi", {})["filters"] = ["redact_scope"]  # trace: the ASGI scopes
    for handler in config["handlers"].values():
        handler.setdefault("filters", []).append("redact_key_shaped")
    return config


def run_server(host: str, port: int, workers: int = 1, log_level: str = "info", log_format: str = "text",
               stdout_free: bool = False) -> None:
    """Run ``api.app:create_app`` under uvicorn (blocks until stopped)."""
    import uvicorn

    shared = share_metrics(workers)
    try:
        uvicorn.run(
            "api.app:create_app", factory=True, host=host, port=port, workers=workers, log_level=log_level,
            log_config=log_config(log_format, stdout_free), proxy_headers=False, server_header=False,
        )
    finally:
        if shared is not None:
            shared.remove()


def share_metrics(workers: int) -> ServerDir | None:
    """With several workers, a directory of this server's under the data home through which /metrics adds up
    every worker's values (api.metrics_shared); named in the environment here, so that every worker, restarted ones
    included, inherits it. One worker keeps its values in memory, as before."""
    if workers < 2:
        return None
    import os

    from api.metrics_shared import MULTIPROC_ENV, share_between_workers
    from pipeline.commands.output import fail
    from warehouse.config import get_settings

    root = get_settings().metrics_dir.absolute()
    try:
        shared = share_between_workers(root)
    except OSError as exc:
        fail(f"cannot make the metrics directory of the {workers} workers in {root} ({exc})")
    os.environ[MULTIPROC_ENV] = str(shared.path)
    return shared


def preflight(settings: Settings) -> None:
    """What serving needs, checked before it starts (by `serve`, and by `up` before its run): a bad setting or an
    unreachable store is one line and an exit code, not a traceback from the server's start-up."""
    check_pdf_allow_hosts(settings)  # configuration first: a server outage must not hide a bad setting
    check_platform_store(settings)
    check_redis(settings)


def check_platform_store(settings: Settings) -> None:
    """Open the platform store once before serving (and migrate it, before the workers start): a bad or
    unreachable CRYPTOWIRE_DATABASE_URL is a one-line error here rather than a traceback from each worker."""
    from accounts import StoreConfigError, StoreUnavailable, open_store
    from pipeline.commands.output import fail

    try:
        open_store(settings).close()
    except (StoreConfigError, StoreUnavailable) as exc:
        fail(str(exc))


def check_redis_scheme(settings: Settings) -> None:
    """A CRYPTOWIRE_REDIS_URL of another scheme is a bad setting: one line, exit 2 (before redis-py raises on it)."""
    from pipeline.commands.output import fail
    from warehouse.config import redis_url_problem

    if settings.redis_url and (problem := redis_url_problem(settings.redis_url)):
        fail(problem, code=2)


def check_redis(settings: Settings) -> None:
    """Reach CRYPTOWIRE_REDIS_URL once before serving: with Redis down every metered request would get 503 while
    the server looked healthy. A URL of another scheme is a bad setting (exit 2), an unreachable one exit 1."""
    from urllib.parse import urlsplit

    from pipeline.commands.output import fail

    url = settings.redis_url
    if not url:
        return
    import redis  # only when configured: `serve` stays small without it
    check_redis_scheme(settings)
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
        try:
            client.ping()
        finally:
            client.close()
    except ValueError as exc:  # redis-py's parse errors (a bad port or database number) hold no password
        fail(f"CRYPTOWIRE_REDIS_URL is not a valid Redis URL ({exc}): set it to redis://HOST:6379/0", code=2)
    except (redis.RedisError, OSError) as exc:
        parts = urlsplit(url)  # host, port and database, never the password
        where = parts.path if parts.scheme == "unix" else f"{parts.hostname}:{parts.port or 6379}{parts.path}"
        if isinstance(exc, redis.AuthenticationError):
            advice = "the password in the URL (redis://:PASSWORD@host:6379/0) is missing or wrong"
        elif isinstance(exc, redis.ResponseError):  # Redis answered: its words hold no password of ours
            advice = f"Redis said: {str(exc)[:120]}"
            if "protected mode" in str(exc):
                advice = ("Redis refuses other machines without a password (protected mode): start it with "
                          "--requirepass PASSWORD and put the password in the URL, redis://:PASSWORD@host:6379/0")
        else:
            advice = "start Redis there or fix the URL"
        fail(f"CRYPTOWIRE_REDIS_URL: cannot use Redis at {where} ({type(exc).__name__}): {advice} (the API "
             "meters every request through it)")


def check_pdf_allow_hosts(settings: Settings) -> None:
    """Parse the PDF allow list before serving: a bad entry is a one-line error naming the variable, as every
    other bad setting is, rather than uvicorn's traceback from the app's start-up."""
    import json

    from api.pdf.ssrf import Policy
    from pipeline.commands.output import fail

    try:
        Policy(settings.pdf_allow_hosts)
    except ValueError as exc:
        shown = json.dumps(settings.pdf_allow_hosts)
        fail(f"CRYPTOWIRE_PDF_ALLOW_HOSTS='{shown}': {exc}; fix or remove that entry", code=2)


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        host: str | None = typer.Option(None, help="Address to bind (default: CRYPTOWIRE_HOST, 127.0.0.1)."),
        port: int | None = typer.Option(
            None, min=1, max=65535, help="Port to bind, 1-65535 (default: CRYPTOWIRE_PORT, 8000)."
        ),
        workers: int = typer.Option(1, min=1, help="uvicorn worker processes."),
        log_level: str = typer.Option("info", help="critical, error, warning, info, debug or trace."),
    ) -> None:
        """Serve the API: GraphQL on /crypto-news/{key} and /prediction-events/{key} (GraphiQL in a browser),
        HTML-to-PDF on /api/html-to-pdf/{key}, usage on /api/usage/{key}, the overview page on /, and /metrics,
        /healthz, /readyz. Reads the newest published snapshot; access keys are redacted from the access log."""
        from warehouse.config import get_settings

        settings = get_settings()  # CRYPTOWIRE_PORT's range is checked with every setting (pipeline/cli.py)
        settings.ensure_dirs()
        preflight(settings)
        if workers > 1 and not settings.redis_url:
            typer.echo(f"note: without CRYPTOWIRE_REDIS_URL each of the {workers} workers keeps its own token bucket, "
                       f"so a key may make up to {workers}x its plan's request rate (daily CU are shared exactly); "
                       "set CRYPTOWIRE_REDIS_URL for one shared rate limit", err=True)
        run_server(host or settings.host, port or settings.port, workers, log_level.lower(), settings.log_format)
