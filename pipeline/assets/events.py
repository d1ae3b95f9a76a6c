"""Derived prediction events."""


import dagster as dg

from pipeline.assets.enrich import articles
from pipeline.assets.ingest import POOL
from pipeline.automation import EAGER
from pipeline.resources import WarehouseResource
from warehouse.crashpoints import crash_point

ARTICLE_SQL = """
SELECT id, title, summary, url, image_url, source_name, published_at, tickers, topics
FROM articles WHERE len(tickers) > 0
"""


@dg.asset(
    group_name="derive",
    pool=POOL,
    deps=[articles],
    kinds={"duckdb"},
    automation_condition=EAGER,
    description="Resolvable binary (Yes/No) prediction events derived from the news, with stable pevt_ ids.",
)
def prediction_events(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    from models.tagging import load_registry
    from pipeline.events import ArticleIn, derive_events
    from warehouse.db import utcnow
    from warehouse.events import merge_events

    names = {a.symbol: a.name for a in load_registry()}
    with warehouse.connect() as con:
        inputs = [
            ArticleIn(
                id=r[0], title=r[1], summary=r[2], url=r[3], image_url=r[4], source_name=r[5],
                published_at=r[6], tickers=tuple(r[7] or ()), topics=tuple(r[8] or ()),
            )
            for r in con.execute(ARTICLE_SQL).fetchall()
        ]
        candidates = derive_events(inputs, names)
        report = merge_events(con, candidates, utcnow())
        total, open_ = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE date > now()::TIMESTAMP) FROM prediction_events"
        ).fetchall()[0]
    crash_point("events:committed")
    context.log.info(f"{len(candidates)} candidate events from {len(inputs)} tagged articles")
    return dg.MaterializeResult(
        metadata={
            "articles_considered": len(inputs),
            "candidates": len(candidates),
            "rows": total,
            "open": open_,
            **{k: v for k, v in vars(report).items() if isinstance(v, int | str)},
        }
    )
