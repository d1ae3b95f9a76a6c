"""Publishing the curated tables as an immutable serving snapshot for the API."""


from pathlib import Path

import dagster as dg

from pipeline.assets.enrich import articles
from pipeline.assets.events import prediction_events
from pipeline.assets.ingest import POOL
from pipeline.assets.sentiment import asset_sentiment
from pipeline.assets.stories import stories
from pipeline.automation import ON_CHANGE
from pipeline.resources import SnapshotsResource, WarehouseResource


@dg.asset(
    group_name="serve",
    pool=POOL,
    deps=[articles, prediction_events, asset_sentiment, stories],
    kinds={"duckdb"},
    automation_condition=ON_CHANGE,
    description="A new set of DuckDB part files with the curated tables in serving order (closed periods reused "
    "when unchanged, a small head rebuilt), published atomically; the API switches to it between requests. The "
    "newest few are kept.",
)
def serving_snapshot(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, snapshots: SnapshotsResource
) -> dg.MaterializeResult:
    from warehouse.parts import publish_set
    from warehouse.repair import repair_snapshots

    # Holding the writer pool, no other publish runs: what a crashed one left can go (scheduled runs too).
    for line in repair_snapshots(Path(snapshots.directory)):
        context.log.warning(f"repaired: {line}")
    with warehouse.connect() as con:
        path = publish_set(con, Path(snapshots.directory), keep=snapshots.keep)
    from warehouse.parts import set_parts

    names = set_parts(path)
    return dg.MaterializeResult(
        metadata={"path": dg.MetadataValue.path(str(path)), "parts": len(names),
                  "bytes": sum((path.parent / n).stat().st_size for n in names)}
    )
