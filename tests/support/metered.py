"""A tiny ASGI app around the real metering: a metered no-op route, the same route unmetered, and /api/usage.

In a thread: ``ApiServer(metered_app(access))``. As a subprocess (kill -9 tests, the benchmark):
``.venv/bin/python -m uvicorn --factory tests.support.metered:create`` with ``CRYPTOWIRE_HOME`` (and
``CRYPTOWIRE_PLANS_FILE``) in the environment.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import api.usage
from api.access import Access
from api.app import AppState, default_access
from api.errors import ApiError
from tests.support.apiserver import free_port
from warehouse.config import Settings, get_settings

DEFAULT_COST = 100
PROJECT = Path(__file__).resolve().parents[2]


def metered_app(access: Access, settings: Settings | None = None, close: bool = False) -> Starlette:
    """``GET /metered/{key}?cost=N&api=news[&fail=1]``: check, charge N CU (then refund if fail=1 -> 422);
    ``GET /unmetered/{key}``: the same response with no metering at all. ``close``: close ``access`` on shutdown
    (otherwise the caller owns it)."""
    settings = settings or get_settings()

    async def metered(request: Request) -> JSONResponse:
        # the query is parsed only when there is one: the benchmark measures metering, not query parsing
        query = request.query_params if request.scope["query_string"] else {}
        caller = None
        try:
            caller = await access.check(request.path_params["key"], query.get("api", "news"))
            charge = await access.reserve(caller, int(query.get("cost", DEFAULT_COST)))
        except ApiError as exc:
            return exc.rest_response(access.headers(caller))
        if query.get("fail"):  # the work failed for a reason that costs nothing
            await access.refund(charge)
            return JSONResponse({"ok": False}, status_code=422, headers=access.headers(caller, charge))
        return JSONResponse({"ok": True}, headers=access.headers(caller, charge))

    async def unmetered(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        if close:
            await access.close()

    state = AppState(settings=settings, access=access)
    routes: list[Any] = [
        Route("/metered/{key}", metered),
        Route("/unmetered/{key}", unmetered),
        *api.usage.routes(state),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def create() -> Starlette:
    """uvicorn factory: the metered app on the configured platform database."""
    settings = get_settings()
    return metered_app(default_access(settings), settings, close=True)


# --- helpers for the metering tests ------------------------------------------------------------------------------
def write_plans(path: Path, plans: dict[str, tuple[int, float]]) -> Path:
    """A plans file: ``{name: (cu_per_day, requests_per_second)}``."""
    lines = ["plans:"]
    for name, (cu, rps) in plans.items():
        lines += [f"  {name}:", f"    title: {name.title()}", '    price_usd: "0"', f"    cu_per_day: {cu}",
                  f"    requests_per_second: {rps}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def metering_settings(home: Path, plans: dict[str, tuple[int, float]] | None = None,
                      redis_url: str | None = None, database_url: str | None = None) -> Settings:
    """Settings on ``home``; with ``plans``, a plans file there overrides the bundled plans; ``database_url``: the
    platform store on Postgres."""
    home.mkdir(parents=True, exist_ok=True)
    plans_file = write_plans(home / "plans.yaml", plans) if plans else None
    return Settings(home=home, plans_file=plans_file, redis_url=redis_url, database_url=database_url)


class MeteredProcess:
    """The metered app in its own uvicorn process (so that tests can ``kill -9`` it)."""

    def __init__(self, settings: Settings) -> None:
        self.port = free_port()
        env = {**os.environ, "CRYPTOWIRE_HOME": str(settings.home), "PYTHONPATH": str(PROJECT)}
        env.pop("CRYPTOWIRE_PLANS_FILE", None)
        env.pop("CRYPTOWIRE_REDIS_URL", None)
        env.pop("CRYPTOWIRE_DATABASE_URL", None)
        if settings.database_url:
            env["CRYPTOWIRE_DATABASE_URL"] = settings.database_url
        if settings.plans_file:
            env["CRYPTOWIRE_PLANS_FILE"] = str(settings.plans_file)
        if settings.redis_url:
            env["CRYPTOWIRE_REDIS_URL"] = settings.redis_url
        self._env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> MeteredProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "tests.support.metered:create", "--host", "127.0.0.1",
             "--port", str(self.port), "--no-access-log", "--log-level", "warning"],
            cwd=PROJECT, env=self._env,
        )
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the metered server exited with {self.proc.returncode} during startup")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError("the metered server did not start within 60 s") from None
                time.sleep(0.05)

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    def __enter__(self) -> MeteredProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
