"""What `cryptowire status` reports: paths, counts, freshness, the last run per asset, per-feed health."""

from __future__ import annotations

from typing import Any

from warehouse.config import Settings

TABLES = (
    "raw_articles",
    "articles",
    "article_tickers",
    "crypto_assets",
    "prediction_events",
    "prediction_event_sources",
    "feed_fetches",
)

FEED_HEALTH_SQL = """
SELECT feed_name, feed_url, started_at, http_status, items_seen, items_new, not_modified, error
FROM feed_fetches
QUALIFY row_number() OVER (PARTITION BY feed_url ORDER BY started_at DESC) = 1
ORDER BY feed_name
"""


def _warehouse(settings: Settings) -> dict[str, Any]:
    import duckdb

    from warehouse import db

    path = settings.warehouse_path
    if not path.exists():
        return {"exists": False, "hint": "run `cryptowire materialize` to create it"}
    try:
        con = db.connect(path, read_only=True)
    except duckdb.IOException as exc:
        return {"exists": True, "error": f"warehouse is busy (a run holds it): {exc}"}
    try:
        names = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in TABLES if t in names}
        # Undated items carry their fetch time (date_inferred): the newest *dated* article says how fresh feeds are.
        newest = (
            con.execute("SELECT max(published_at) FILTER (WHERE NOT date_inferred) FROM raw_articles").fetchall()[0][0]
            if "raw_articles" in names
            else None
        )
        feeds = [
            dict(zip(("feed", "url", "at", "status", "seen", "new", "not_modified", "error"), r, strict=True))
            for r in con.execute(FEED_HEALTH_SQL).fetchall()
        ] if "feed_fetches" in names else []
    finally:
        con.close()
    return {"exists": True, "counts": counts, "newest_article": newest, "feeds": feeds}


def _runs(settings: Settings) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per asset, the last materialization and the outcome of the last run that planned it; per check, its
    last result. Both from the Dagster instance under the data home."""
    if not (settings.dagster_home / "dagster.yaml").exists():
        return [], []
    import dagster as dg

    from pipeline.definitions import ALL_ASSETS, ALL_CHECKS
    from pipeline.jobs import prepare_dagster_home

    prepare_dagster_home(settings)
    instance = dg.DagsterInstance.get()
    assets = []
    for asset in ALL_ASSETS:
        mat = instance.get_latest_materialization_event(asset.key)
        planned = instance.get_latest_planned_materialization_info(asset.key)
        run = instance.get_run_by_id(planned.run_id) if planned else None
        assets.append(
            {
                "asset": asset.key.to_user_string(),
                "last_materialized": mat.timestamp if mat else None,
                "last_run": {"run_id": run.run_id, "status": run.status.value} if run else None,
            }
        )
    checks = []
    for definition in ALL_CHECKS:
        for check_key in definition.check_keys:
            records = instance.event_log_storage.get_asset_check_execution_history(check_key, limit=1)
            if not records:
                continue
            event = records[0].event
            data = event.dagster_event.event_specific_data if event and event.dagster_event else None
            checks.append(
                {
                    "asset": check_key.asset_key.to_user_string(),
                    "check": check_key.name,
                    "passed": getattr(data, "passed", None),
                }
            )
    return assets, checks


def collect(settings: Settings) -> dict[str, Any]:
    assets, checks = _runs(settings)
    return {
        "home": str(settings.home.resolve()),
        "warehouse": str(settings.warehouse_path.resolve()),
        "snapshots": str(settings.snapshots_dir.resolve()),
        "feeds_file": str(settings.feeds_file),
        **_warehouse(settings),
        "assets": assets,
        "checks": checks,
    }


def render(report: dict[str, Any]) -> str:
    from datetime import UTC, datetime

    lines = [
        f"data home:  {report['home']}",
        f"warehouse:  {report['warehouse']}",
        f"snapshots:  {report['snapshots']}",
        f"feeds file: {report['feeds_file']}",
    ]
    if not report.get("exists"):
        lines.append(f"no warehouse yet: {report.get('hint', '')}")
        return "\n".join(lines)
    if report.get("error"):
        lines.append(report["error"])
        return "\n".join(lines)
    lines.append("tables:")
    lines += [f"  {t:<26} {n:>8}" for t, n in report["counts"].items()]
    lines.append(f"newest article: {report['newest_article']}")
    if report["assets"]:
        lines.append("assets:")
        for a in report["assets"]:
            when = (
                datetime.fromtimestamp(a["last_materialized"], UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
                if a["last_materialized"]
                else "never"
            )
            run = a["last_run"]["status"] if a["last_run"] else "-"
            lines.append(f"  {a['asset']:<20} last materialized {when:<24} last run {run}")
    if report["checks"]:
        failed = [c for c in report["checks"] if c["passed"] is False]
        lines.append(f"checks: {len(report['checks']) - len(failed)} passed, {len(failed)} failed")
        lines += [f"  FAILED {c['asset']}.{c['check']}" for c in failed]
    if report["feeds"]:
        lines.append("feeds (last fetch):")
        for f in report["feeds"]:
            state = "304" if f["not_modified"] else (f["status"] or "-")
            tail = f"  ERROR {f['error']}" if f["error"] else ""
            lines.append(f"  {f['feed']:<28} {state!s:>4} seen {f['seen']:>4} new {f['new']:>4}{tail}")
    return "\n".join(lines)
