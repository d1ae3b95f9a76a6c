"""Ingestion: feeds -> raw_articles."""


from pathlib import Path

import dagster as dg

from pipeline.automation import RAW_FRESHNESS
from pipeline.resources import FeedsResource, WarehouseResource
from warehouse.config import get_settings
from warehouse.crashpoints import crash_point

POOL = "duckdb_writer"


@dg.asset(
    group_name="ingest",
    pool=POOL,
    kinds={"duckdb", "python"},
    freshness_policy=RAW_FRESHNESS,
    description="One row per unique article from every enabled feed (RSS/Atom), merged idempotently.",
)
def raw_articles(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, feeds: FeedsResource
) -> dg.MaterializeResult:
    from pipeline.ingest import AllFeedsFailed, load_feeds
    from pipeline.ingest.feeds import FeedsFileError
    from pipeline.ingest.run import ingest_feeds

    try:
        sources = [f for f in load_feeds(Path(feeds.feeds_file)) if f.enabled]
    except FeedsFileError as exc:  # as AllFeedsFailed: the UI shows the text, the summary the cause
        raise dg.Failure(description=str(exc)) from exc
    try:  # the warehouse is open before and after the downloads, not during: analysts can read it meanwhile
        report = ingest_feeds(warehouse.connect, sources, get_settings(), run_id=context.run.run_id)
    except AllFeedsFailed as exc:
        raise dg.Failure(description=str(exc)) from exc
    total = report.total
    crash_point("ingest:committed")
    health = [
        {
            "feed": r.feed.name,
            "status": r.http_status,
            "not_modified": r.not_modified,
            "seen": r.items_seen,
            "new": r.items_new,
            "updated": r.items_updated,
            "ms": round(r.duration_ms, 1),
            "error": r.error,
            "warning": r.warning,  # items were read, but not all was well (lenient parse, body cut at the cap)
            "empty": r.empty,  # the document held no items: a moved feed often leaves an empty channel behind
        }
        for r in report.results
    ]
    failed = [h for h in health if h["error"]]
    for h in failed:
        context.log.warning(f"feed {h['feed']} failed: {h['error']}")
    empty = [h["feed"] for h in health if h["empty"]]
    # Also in the metadata: `cryptowire materialize` mutes Dagster's console lines, its summary shows this.
    warning = (
        f"{len(empty)} feed(s) answered with no items ({', '.join(empty)}): check that their URLs still are "
        "the publishers' feeds (a moved feed often leaves an empty channel behind)"
        if empty else None
    )
    if warning:
        context.log.warning(warning)
    return dg.MaterializeResult(
        metadata={
            "new": report.new,
            "updated": report.updated,
            "unchanged": report.unchanged,
            "rows": total,
            "feeds": len(health),
            "feeds_failed": len(failed),
            "feeds_empty": len(empty),
            **({"warning": warning} if warning else {}),
            "feed_health": dg.MetadataValue.json(health),
        },
        # The same version when nothing was added or changed: `articles` and what follows it run on a change of
        # it (pipeline.automation.ON_CHANGE), not on every poll.
        data_version=dg.DataVersion(report.version),
    )
