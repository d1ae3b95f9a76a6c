"""The one configuration object. Every path lives under one data home (``CRYPTOWIRE_HOME``)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SAMPLE_FEEDS = PROJECT_ROOT / "pipeline" / "sample" / "feeds.yaml"


# Debian's chromium-headless-shell is the same Chromium build without the desktop browser's per-profile services:
# a fresh context per conversion costs about half the CPU (docs/benchmarks.md, HTML-to-PDF).
CHROMIUM_CANDIDATES = (Path("/usr/bin/chromium-headless-shell"), Path("/usr/bin/chromium"))


def default_chromium() -> Path:
    for path in CHROMIUM_CANDIDATES:
        if path.exists():
            return path
    return CHROMIUM_CANDIDATES[-1]  # missing: the pool's start-up error names the path and the package


REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def redis_url_problem(url: str) -> str | None:
    """Why ``CRYPTOWIRE_REDIS_URL`` is not a Redis URL (showing its scheme only: the URL may hold a password), or
    None. Checked by the commands that use Redis (serve, up, usage, worker, backfill) before Celery or redis-py fail
    on it."""
    if url.startswith(REDIS_SCHEMES):
        return None
    scheme = url.split("://", 1)[0] + "://" if "://" in url else "no scheme"
    return (f"CRYPTOWIRE_REDIS_URL must start with redis://, rediss:// or unix:// (got {scheme}): set it to "
            "redis://HOST:6379/0 of a running Redis in the environment or .env, or unset it")


def raw_setting(name: str) -> str | None:
    """A variable as given, empty included: the environment first, then ./.env (as the settings read them)."""
    import os

    if name in os.environ:
        return os.environ[name]
    if Path(".env").is_file():
        from dotenv import dotenv_values

        return dotenv_values(".env").get(name)
    return None


class Settings(BaseSettings):
    """Read from ``CRYPTOWIRE_*`` environment variables (and a ``.env`` file if present)."""

    # An empty variable (CRYPTOWIRE_PLANS_FILE=) means the default, as people expect from `export X=`.
    model_config = SettingsConfigDict(env_prefix="CRYPTOWIRE_", env_file=".env", extra="ignore", env_ignore_empty=True)

    # --- paths -----------------------------------------------------------------
    home: Path = Field(default=Path(".cryptowire"), description="Data home: warehouse, snapshots, platform db, Dagster home.")
    feeds_file: Path = Field(default=SAMPLE_FEEDS, description="Feeds YAML to ingest (default: the bundled sample).")

    # --- ingestion -------------------------------------------------------------
    fetch_concurrency: int = Field(default=16, ge=1, description="Feeds fetched at once.")
    # allow_inf_nan=False: "inf" or "nan" would leave a run without a deadline
    fetch_connect_timeout: float = Field(default=5.0, gt=0, allow_inf_nan=False,
                                         description="Seconds to connect to a feed host.")
    fetch_read_timeout: float = Field(default=15.0, gt=0, allow_inf_nan=False,
                                      description="Seconds between bytes from a feed host.")
    fetch_deadline: float = Field(default=120.0, gt=0, allow_inf_nan=False,
                                  description="Seconds for one whole ingestion run.")
    fetch_max_bytes: int = Field(default=10 * 1024 * 1024, ge=1024, description="Feed bodies are cut at this size.")
    feed_max_items: int = Field(
        default=2000, ge=1,
        description="Items read from one feed document, in document order (feeds list the newest first); the rest "
                    "are dropped with a warning. A feed of small items cut at the size cap held 77,000.",
    )
    fetch_max_redirects: int = Field(default=5, ge=0, description="Redirects followed per feed.")
    fetch_retries: int = Field(default=2, ge=0, description="Retries on timeouts and 5xx (with backoff).")
    user_agent: str = Field(
        default="cryptowire/0.1 (+https://github.com/cryptowire/cryptowire; feed reader)",
        description="User-Agent sent to feed hosts.",
    )

    @field_validator("user_agent")
    @classmethod
    def _header_text(cls, value: str) -> str:
        # Sent as a header with every request: anything else fails every feed with an encoding error.
        bad = next((c for c in value if not (c.isascii() and c.isprintable())), None)
        if bad is not None:
            raise ValueError(f"holds {bad!r}: a User-Agent is printable ASCII on one line")
        if not value.strip() or len(value) > 512:
            raise ValueError("a User-Agent is 1 to 512 characters, not only spaces")
        return value

    price_source_url: str = Field(
        default="https://api.coingecko.com/api/v3",
        description="CoinGecko-compatible API that asset_reference_prices reads today's prices from ('' = off: "
        "event checks use the shipped reference table only).",
    )

    @model_validator(mode="after")
    def _empty_price_source_is_off(self) -> Settings:
        # env_ignore_empty drops an empty value, but for this setting empty is documented as "fetching is off"
        if "price_source_url" not in self.model_fields_set and raw_setting("CRYPTOWIRE_PRICE_SOURCE_URL") == "":
            self.price_source_url = ""
        return self

    # --- orchestration ---------------------------------------------------------
    schedule_cron: str = Field(default="*/10 * * * *", description="When the feeds are polled (cron, UTC).")

    @field_validator("schedule_cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        from warehouse.cron import cron_problem

        problem = cron_problem(value)
        if problem:
            raise ValueError(problem)
        return value
    fetch_log_days: int = Field(default=30, ge=1, description="Days of feed_fetches rows kept by the maintenance job.")
    run_history_days: int = Field(
        default=7, ge=1, description="Days of finished Dagster runs kept (about 0.6 MB a run on SQLite); the runs "
        "holding each asset's latest materialization are always kept.")

    # --- enrichment ------------------------------------------------------------
    sentiment_threads: int = Field(default=0, ge=0, description="Sentiment inference threads (0: number of cores).")

    # --- workers (cryptowire worker / backfill; Celery over CRYPTOWIRE_REDIS_URL) -------------------------------
    worker_visibility_timeout: float = Field(
        default=1800.0, gt=0,
        description="Seconds after which a partition taken by a worker that has not finished it (killed, lost) is "
        "handed to another worker. Longer than the slowest partition takes: a live worker past it gets a twin "
        "(harmless, partitions are idempotent, but wasted work).",
    )
    worker_wait_seconds: float = Field(
        default=900.0, gt=0,
        description="The Dagster job `articles_on_workers` fails (and frees its run slot) when, for this long, no "
        "worker took any queued partition and none of the run's partitions finished: no `cryptowire worker` is "
        "running. Not a bound on total time: a partition a worker took counts as progress for up to "
        "CRYPTOWIRE_WORKER_VISIBILITY_TIMEOUT.",
    )

    # --- serving ---------------------------------------------------------------
    host: str = Field(default="127.0.0.1", description="Address `cryptowire serve` binds.")
    port: int = Field(default=8000, ge=1, le=65535, description="Port `cryptowire serve` binds.")
    snapshots_keep: int = Field(default=3, ge=1, description="Serving snapshots kept on disk.")
    snapshot_poll_seconds: float = Field(
        default=1.0, gt=0, description="How often the API checks for a newly published serving snapshot."
    )
    page_cache_size: int = Field(
        default=512, ge=0, description="Result pages the API keeps in memory per snapshot (0: no cache)."
    )
    plans_file: Path | None = Field(default=None, description="Plans YAML overriding the bundled plans.yaml.")
    redis_url: str | None = Field(default=None, description="Share rate limits via Redis (redis://...), and the daily counters too unless CRYPTOWIRE_DATABASE_URL keeps them in Postgres.")
    database_url: str | None = Field(
        default=None,
        description="Postgres for the platform store and Dagster's instance (postgresql://...); unset: SQLite and "
        "Dagster's own storage under the data home.",
    )
    log_format: Literal["text", "json"] = Field(default="text", description="`text` or `json`.")

    # --- html-to-pdf -----------------------------------------------------------
    chromium_path: Path = Field(
        default_factory=default_chromium,
        description="Chromium binary for PDF rendering (default: Debian's headless shell if installed, else chromium).",
    )
    pdf_concurrency: int = Field(default=0, ge=0, description="Pages rendered at once (0: number of cores).")
    pdf_queue: int = Field(default=16, ge=0, description="Requests waiting for a renderer before 503.")
    pdf_per_key: int = Field(default=2, ge=1, description="PDF requests one key may have in progress at once, per "
                             "worker process (429 beyond): a failed render is refunded, so without it one key could "
                             "hold every renderer and queue place with slow pages, for free.")
    pdf_allow_hosts: list[str] = Field(
        default_factory=list,
        description="Destinations the PDF renderer may reach despite the SSRF rules (JSON list): host, host:port, "
        "IP, IP:port, [IPv6]:port or CIDR.",
    )
    pdf_timeout_ms: int = Field(default=30_000, ge=1000, le=60_000,
                                description="Default per-request PDF deadline (timeoutMs): 1000 to 60000 ms.")
    pdf_restart_every: int = Field(default=200, ge=0, description="Conversions after which the browser is replaced (0: never).")
    pdf_max_memory_mb: int = Field(default=1024, ge=1, description="Browser memory (PSS, MB) above which it is replaced.")
    pdf_prewarm: bool = Field(default=True, description="Launch Chromium when the server starts (else on first use).")

    # --- derived paths ---------------------------------------------------------
    @property
    def warehouse_path(self) -> Path:
        return self.home / "warehouse.duckdb"

    @property
    def snapshots_dir(self) -> Path:
        return self.home / "snapshots"

    @property
    def platform_db(self) -> Path:
        return self.home / "platform.sqlite"

    @property
    def models_dir(self) -> Path:
        """Built model artefacts (the sentiment model's int8 graph), rebuilt when missing."""
        return self.home / "models"

    @property
    def materialize_lock(self) -> Path:
        """The flock every warehouse-writing run holds (pipeline.runlock)."""
        return self.dagster_home / "materialize.lock"

    @property
    def partitions_dir(self) -> Path:
        """Partition inputs and results of `cryptowire backfill` (shared with the workers)."""
        return self.home / "partitions"

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

    @property
    def dagster_yaml(self) -> Path:
        """The instance's configuration in the Dagster home (written by ``pipeline.jobs.prepare_dagster_home``)."""
        return self.dagster_home / "dagster.yaml"

    @property
    def chromium_tmp_dir(self) -> Path:
        """Temp files of the PDF renderer (Playwright's driver and Chromium), one directory per server process."""
        return self.home / "run" / "chromium-tmp"

    @property
    def pdf_charges_dir(self) -> Path:
        """The PDF endpoint's charge journals, one per server process: a killed server's open charges are refunded
        by the next start (api/pdf/journal.py)."""
        return self.home / "run" / "pdf-charges"

    @property
    def metrics_dir(self) -> Path:
        """With ``serve --workers N``: one directory per server of its workers' metric files, which /metrics adds
        up (api/metrics_shared.py)."""
        return self.home / "run" / "metrics"

    def as_env(self) -> dict[str, str]:
        """These settings as ``CRYPTOWIRE_*`` variables, paths made absolute: a child process started in another
        directory (``cryptowire dev``) sees exactly these values, whatever it finds in its own .env."""
        env: dict[str, str] = {}
        for name, value in self:
            if value is None:
                continue
            if isinstance(value, Path):
                text = str(value.resolve())
            elif isinstance(value, list):
                text = json.dumps(value)
            elif isinstance(value, bool):
                text = "true" if value else "false"
            else:
                text = str(value)
            env[f"CRYPTOWIRE_{name.upper()}"] = text
        return env

    def ensure_dirs(self) -> None:
        for d in (self.home, self.snapshots_dir, self.dagster_home):
            d.mkdir(parents=True, exist_ok=True)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings; tests call ``get_settings.cache_clear()`` after changing the environment."""
    return Settings()
