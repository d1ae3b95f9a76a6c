"""Publishing the curated tables as an immutable serving snapshot for the API."""


from pathlib import Path

import dagster as dg

from pipeline.assets.enrich import articles
from pipeline.assets.events import prediction_events
from pipeline.assets.ingest import POOL
from pipeline.assets.sentiment import asset_sentiment
from pipeline.assets.stories import stories
from pipeline.automation import EAGER
from pipeline.resources import SnapshotsResource, WarehouseResource


@dg.asset(
    group_name="serve",
    pool=POOL,
    deps=[articles, prediction_events, asset_sentiment, stories],
    kinds={"duckdb"},
    automation_condition=EAGER,
    description="A new DuckDB file with the curated tables in serving order, published atomically; the API "
    "switches to it between requests. The newest few are kept.",
)
def serving_snapshot(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, snapshots: SnapshotsResource
) -> dg.MaterializeResult:
    from warehouse.publish import publish_snapshot
    from warehouse.repair import repair_snapshots

    # Holding the writer pool, no other publish runs: what a crashed one left can go (scheduled runs too).
    for line in repair_snapshots(Path(snapshots.directory)):
        context.log.warning(f"repaired: {line}")
    with warehouse.connect() as con:
        path = publish_snapshot(con, Path(snapshots.directory), keep=snapshots.keep)
    return dg.MaterializeResult(
        metadata={"path": dg.MetadataValue.path(str(path)), "bytes": path.stat().st_size}
    )
