"""Derived prediction events."""


import dagster as dg

from pipeline.assets.enrich import articles
from pipeline.assets.ingest import POOL
from pipeline.automation import FULL_DERIVATION_TAG, ON_CHANGE, WHEN_MISSING
from pipeline.resources import WarehouseResource
from warehouse.crashpoints import crash_point


@dg.asset(
    group_name="derive",
    pool=POOL,
    kinds={"duckdb"},
    automation_condition=dg.AutomationCondition.on_cron("0 */6 * * *") | WHEN_MISSING,
    description="Today's USD price of every asset in the reference table, from a CoinGecko-compatible API "
    "(CRYPTOWIRE_PRICE_SOURCE_URL), for the event checks' price bands. Offline it fetches nothing and says why: "
    "the shipped dated table (pipeline/events/data/asset_reference.csv) still applies. Coins the source did not "
    "answer for, and assets whose newest price is older than 90 days, are named in the metadata.",
)
def asset_reference_prices(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    from datetime import date

    from pipeline.events.reference import STALE_AFTER, default_reference
    from pipeline.prices import fetch_prices
    from warehouse.config import get_settings
    from warehouse.db import utcnow
    from warehouse.prices import load_prices, store_prices

    settings = get_settings()
    now = utcnow()
    reference = default_reference()
    ids = reference.coingecko_ids()
    metadata: dict[str, str | int] = {}
    warnings: list[str] = []  # also in the metadata: Dagster's console lines are muted in `cryptowire materialize`
    fetched: list[tuple[str, date, float]] = []
    if not settings.price_source_url:
        metadata["note"] = "price_source_url is empty: fetching is off"
    else:
        got = fetch_prices(settings.price_source_url, ids, now.date(), user_agent=settings.user_agent)
        fetched = got.prices
        # A source may answer 200 for part of the list (unknown or renamed ids, a plan's limits): name the rest,
        # since derivation then uses older prices for them.
        answered = {t for t, _, _ in got.prices}
        missing = sorted(set(ids) - answered)
        shown = ", ".join(f"{t} ({ids[t]})" for t in missing[:5]) + (
            f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        metadata.update(error=got.error or "", missing=len(missing), missing_coins=shown)
        if got.error:
            context.log.warning(f"reference prices: {got.error}; the shipped table and earlier prices still apply")
        elif missing:
            warnings.append(f"the price source answered for {len(answered)} of {len(ids)} coins, not for "
                            f"{len(missing)} (missing_coins); older prices apply to those")
    with warehouse.connect() as con:
        written = store_prices(con, fetched, settings.price_source_url, now) if fetched else 0
        total = con.execute("SELECT count(*) FROM asset_prices").fetchall()[0][0]
        newest = reference.with_prices(load_prices(con)).newest_price_days()  # what derivation will read
    # Derivation takes the newest price on or before an article's day: for an asset with nothing recent (offline,
    # fetching off, a coin the source skips) that is an old shipped price. Said, not failed: offline runs are normal.
    shipped = reference.newest_price_days()
    stale = [t for t in sorted(shipped) if now.date() - newest[t] > STALE_AFTER]
    metadata["stale_assets"] = len(stale)
    if stale:
        day = max(shipped.values())
        metadata["shipped_price_age_days"] = (now.date() - day).days
        warnings.append(
            f"{len(stale)} of {len(shipped)} assets have no price newer than {STALE_AFTER.days} days, so their "
            f"price bands rest on old prices: the shipped table's newest is from {day.isoformat()} "
            f"({metadata['shipped_price_age_days']} days old); to refresh, run online, or set "
            "CRYPTOWIRE_PRICE_SOURCE_URL to a reachable CoinGecko-compatible API (empty turns fetching off)"
        )
    for line in warnings:
        context.log.warning(f"reference prices: {line}")
    return dg.MaterializeResult(
        # fetched: prices the source answered; stored: new (ticker, day) rows (a day's first price stays)
        metadata={"fetched": len(fetched), "stored": written, "rows": total, "day": now.date().isoformat(), **metadata,
                  "warning": "; ".join(warnings)}
    )


@dg.asset(
    group_name="derive",
    pool=POOL,
    deps=[articles, asset_reference_prices],
    kinds={"duckdb"},
    automation_condition=ON_CHANGE,
    description="Resolvable binary (Yes/No) prediction events derived from the news, with stable pevt_ ids.",
)
def prediction_events(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    from models.tagging import load_registry
    from pipeline.events.memo import derive_and_merge
    from warehouse.db import utcnow

    names = {a.symbol: a.name for a in load_registry()}
    full = context.run.tags.get(FULL_DERIVATION_TAG) == "1"  # the rederive_events job, `materialize --rederive`
    with warehouse.connect() as con:
        # Only the articles whose inputs or prices changed are derived; the rest come from the memo of earlier
        # runs, unless the rules or the reference data changed (pipeline.events.memo).
        derivation, report = derive_and_merge(con, names, utcnow(), full=full)
        candidates, derived = derivation.candidates, derivation.derived
        considered = con.execute("SELECT count(*) FROM articles").fetchall()[0][0]
        total, open_ = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE date > now()::TIMESTAMP AND withdrawn_reason IS NULL) "
            "FROM prediction_events"
        ).fetchall()[0]
    crash_point("events:committed")
    context.log.info(f"{len(candidates)} candidate events from {considered} articles ({derived} derived anew)")
    return dg.MaterializeResult(
        metadata={
            "articles_considered": considered,
            "articles_derived": derived,
            "derived_because": derivation.why,
            "candidates": len(candidates),
            "rows": total,
            "open": open_,
            **{k: v for k, v in vars(report).items() if isinstance(v, int | str)},
        }
    )
