"""Sentiment over time: `asset_sentiment`, per ticker per hour and per day, kept incrementally."""


import dagster as dg

from pipeline.assets.enrich import articles
from pipeline.assets.ingest import POOL
from pipeline.automation import ON_CHANGE
from pipeline.resources import WarehouseResource


@dg.asset(
    group_name="derive",
    pool=POOL,
    deps=[articles],
    kinds={"duckdb"},
    automation_condition=ON_CHANGE,
    description="Per ticker, per hour and per day: articles mentioning it, positive / neutral / negative counts and "
    "the mean sentiment_score (articles with an inferred date are left out). Incremental: only the buckets touched "
    "by new, changed or re-dated articles are recomputed.",
)
def asset_sentiment(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    from warehouse.sentiment import refresh_asset_sentiment

    with warehouse.connect() as con:
        report = refresh_asset_sentiment(con)
    context.log.info(f"{report.changed} article-ticker rows changed: recomputed {report.hours} hours, {report.days} days")
    return dg.MaterializeResult(
        metadata={"changed": report.changed, "hours": report.hours, "days": report.days, "rows": report.rows}
    )
