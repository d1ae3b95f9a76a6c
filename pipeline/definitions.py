"""The Dagster code location: `dagster dev -m pipeline.definitions` (or `cryptowire dev`)."""

from __future__ import annotations

import dagster as dg

from pipeline import dagster_fixes  # noqa: F401  (run workers too: a step waiting for a slot sleeps)
from pipeline.assets.enrich import articles, crypto_assets
from pipeline.assets.events import asset_reference_prices, prediction_events
from pipeline.assets.ingest import raw_articles
from pipeline.assets.sentiment import asset_sentiment
from pipeline.assets.serving import serving_snapshot
from pipeline.assets.stories import stories
from pipeline.automation import (
    articles_on_workers,
    automation_sensor,
    backfill_articles_job,
    ingest_job,
    maintenance,
    recover_dead_runs,
    rederive_events_job,
    refresh_job,
    schedules,
)
from pipeline.checks import ALL_CHECKS
from pipeline.resources import FeedsResource, SnapshotsResource, WarehouseResource
from warehouse.config import Settings, get_settings

ALL_ASSETS = [raw_articles, crypto_assets, articles, asset_reference_prices, prediction_events, asset_sentiment,
              stories, serving_snapshot]



def resources(settings: Settings) -> dict[str, dg.ConfigurableResource]:
    return {
        "warehouse": WarehouseResource(path=str(settings.warehouse_path.resolve())),
        "feeds": FeedsResource(feeds_file=str(settings.feeds_file.resolve())),
        "snapshots": SnapshotsResource(directory=str(settings.snapshots_dir.resolve()), keep=settings.snapshots_keep),
    }


def build_definitions(settings: Settings | None = None) -> dg.Definitions:
    settings = settings or get_settings()
    return dg.Definitions(
        assets=ALL_ASSETS,
        asset_checks=ALL_CHECKS,
        jobs=[ingest_job, refresh_job, backfill_articles_job, rederive_events_job, maintenance, articles_on_workers],
        schedules=schedules(settings),
        sensors=[automation_sensor, recover_dead_runs],
        resources=resources(settings),
    )


defs = build_definitions()
