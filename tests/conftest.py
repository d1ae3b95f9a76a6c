from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from models.sentiment.data import cryptolin_csv
from tests.support.httpserver import LocalServer
from tests.support.servers import POSTGRES_MISSING, REDIS_MISSING, postgres_server, redis_server
from warehouse.config import Settings, get_settings
from warehouse.db import connect

# Apps built by tests that do not render PDFs should not start Chromium in the background; the PDF tests
# build their settings explicitly.
os.environ.setdefault("CRYPTOWIRE_PDF_PREWARM", "false")
# Tests never reach the internet: the reference-price fetch is off unless a test points it at a local server.
os.environ.setdefault("CRYPTOWIRE_PRICE_SOURCE_URL", "")

PROJECT = Path(__file__).resolve().parent.parent
SHARED = (PROJECT / ".." / "shared").resolve()
SHARED_FEEDS = SHARED / "fixtures" / "feeds"
# The repository's own test data (tests/fixtures/README.md): what every test that checks behaviour reads.
FEED_FIXTURES = PROJECT / "tests" / "fixtures" / "feeds"
# The corpus tier, `@pytest.mark.corpus("feeds" | "cryptolin")`: measurements against the external corpora in
# ../shared. CI has them; a clone alone skips these tests, each naming what is missing.
CORPORA = {
    "feeds": SHARED_FEEDS,
    "cryptolin": cryptolin_csv(),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("corpus")
        if marker is None:
            continue
        path = CORPORA[marker.args[0]]
        if not path.exists():
            item.add_marker(pytest.mark.skip(
                reason=f"corpus tier: the {marker.args[0]} corpus is not at {path} (../shared beside the checkout)"
            ))


@pytest.fixture(autouse=True)
def _dagster_home_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """``prepare_dagster_home`` points DAGSTER_HOME at its data home in this process: a test that calls it must
    not leave later tests' Dagster (and the processes they start) on its instance."""
    monkeypatch.setenv("DAGSTER_HOME", os.environ.get("DAGSTER_HOME", ""))  # remembers the value before
    if not os.environ["DAGSTER_HOME"]:
        monkeypatch.delenv("DAGSTER_HOME")


@pytest.fixture
def data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty data home; ``get_settings()`` points at it for the test's duration."""
    home = tmp_path / "home"
    monkeypatch.setenv("CRYPTOWIRE_HOME", str(home))
    get_settings.cache_clear()
    yield home
    get_settings.cache_clear()


@pytest.fixture(scope="session")
def sentiment_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the sentiment model's int8 graph is kept between builds in this test session."""
    return tmp_path_factory.mktemp("sentiment-cache")


@pytest.fixture(scope="session")
def built_models(sentiment_cache: Path) -> Path:
    """`sentiment_cache` with the shipped model's int8 graph built in it (once per session, about 35 s): copied
    into a data home's models/ (`shutil.copytree(built_models, home / "models")`), it spares a subprocess
    `materialize` that build. Tests of the build itself start without it."""
    from models.sentiment import build_model
    from models.sentiment.model import int8_model_version
    from models.sentiment.runtime import cache_file

    if not cache_file(sentiment_cache, int8_model_version()).is_file():  # a model loaded earlier may be elsewhere
        build_model(cache_dir=sentiment_cache)
    return sentiment_cache


@pytest.fixture
def settings(data_home: Path) -> Settings:
    return get_settings()


@pytest.fixture
def postgres_url(tmp_path: Path) -> Iterator[str]:
    """A real Postgres server of its own for this test (initdb + pg_ctl in tmp_path); skips where none is installed."""
    if POSTGRES_MISSING:
        pytest.skip(POSTGRES_MISSING)
    with postgres_server(tmp_path / "postgres") as url:
        yield url


@pytest.fixture
def redis_url_server(tmp_path: Path) -> Iterator[str]:
    """A real redis-server of its own for this test; skips where none is installed."""
    if REDIS_MISSING:
        pytest.skip(REDIS_MISSING)
    with redis_server(tmp_path / "redis") as url:
        yield url


@pytest.fixture
def local_server() -> Iterator[LocalServer]:
    with LocalServer() as srv:
        yield srv


CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium from Debian, driven by Playwright (never `playwright install`)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def pytest_report_header(config: pytest.Config) -> str:
    return f"shared data: {SHARED} ({'present' if SHARED.exists() else 'MISSING'}); cores: {os.cpu_count()}"


@pytest.fixture
def con(tmp_path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """A real warehouse file of this test's own, open read-write."""
    c = connect(tmp_path / "warehouse.duckdb")
    yield c
    c.close()
