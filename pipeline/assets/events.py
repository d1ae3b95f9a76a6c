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
    kinds={"duckdb"},
    automation_condition=dg.AutomationCondition.on_cron("0 */6 * * *"),
    description="Today's USD price of every asset in the reference table, from a CoinGecko-compatible API "
    "(CRYPTOWIRE_PRICE_SOURCE_URL), for the event checks' price bands. Offline it fetches nothing and says why: "
    "the shipped dated table (pipeline/events/data/asset_reference.csv) still applies.",
)
def asset_reference_prices(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    from pipeline.events.reference import default_reference
    from pipeline.prices import fetch_prices
    from warehouse.config import get_settings
    from warehouse.db import utcnow
    from warehouse.prices import store_prices

    settings = get_settings()
    now = utcnow()
    if not settings.price_source_url:
        return dg.MaterializeResult(metadata={"fetched": 0, "note": "price_source_url is empty: fetching is off"})
    got = fetch_prices(settings.price_source_url, default_reference().coingecko_ids(), now.date(),
                       user_agent=settings.user_agent)
    if got.error:
        context.log.warning(f"reference prices: {got.error}; the shipped table and earlier prices still apply")
    with warehouse.connect() as con:
        written = store_prices(con, got.prices, settings.price_source_url, now)
        total = con.execute("SELECT count(*) FROM asset_prices").fetchall()[0][0]
    return dg.MaterializeResult(
        metadata={"fetched": written, "rows": total, "day": now.date().isoformat(), "error": got.error or ""}
    )


@dg.asset(
    group_name="derive",
    pool=POOL,
    deps=[articles, asset_reference_prices],
    kinds={"duckdb"},
    automation_condition=EAGER,
    description="Resolvable binary (Yes/No) prediction events derived from the news, with stable pevt_ ids.",
)
def prediction_events(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    from models.tagging import load_registry
    from pipeline.events import ArticleIn, derive_events
    from pipeline.events.reference import default_reference
    from warehouse.db import utcnow
    from warehouse.events import merge_events
    from warehouse.prices import load_prices

    names = {a.symbol: a.name for a in load_registry()}
    with warehouse.connect() as con:
        inputs = [
            ArticleIn(
                id=r[0], title=r[1], summary=r[2], url=r[3], image_url=r[4], source_name=r[5],
                published_at=r[6], tickers=tuple(r[7] or ()), topics=tuple(r[8] or ()),
            )
            for r in con.execute(ARTICLE_SQL).fetchall()
        ]
        reference = default_reference().with_prices(load_prices(con))
        refused: dict[str, str] = {}
        candidates = derive_events(inputs, names, reference=reference, refused=refused)
        # Every tagged article was read: a stored event not derived now is withdrawn (kept, with the reason).
        report = merge_events(con, candidates, utcnow(), complete=True, refused=refused)
        total, open_ = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE date > now()::TIMESTAMP AND withdrawn_reason IS NULL) "
            "FROM prediction_events"
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
