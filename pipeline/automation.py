"""Schedules, declarative automation, maintenance and backfill jobs."""

from datetime import timedelta

import dagster as dg

from pipeline.resources import SnapshotsResource, WarehouseResource
from warehouse.config import Settings

# raw_articles is polled by the schedule; everything downstream follows its upstream (declarative automation).
EAGER = dg.AutomationCondition.eager()
# Eager, but on a change of the upstream's data version rather than on any new materialization: a poll that found
# nothing new materializes raw_articles with the version it had, and must not re-run everything downstream (and
# publish a new snapshot, which empties the API's page cache) every ten minutes. raw_articles and articles give
# their data versions; an asset that gives none has a new one at each materialization (Dagster's default, from the
# run), so what follows it runs after each of its runs, as eager would. A change made by a run that also
# ran the asset (`cryptowire materialize`) is handled by that run, as in eager.
ON_CHANGE = EAGER.replace(
    "any_deps_updated",
    dg.AutomationCondition.any_deps_match(
        dg.AutomationCondition.data_version_changed() | dg.AutomationCondition.will_be_requested()
    ).with_label("any_deps_changed"),
).with_label("eager, on a change of upstream data")  # the UI shows labels: not "eager", which it is not quite
# A step that failed (an analyst held the warehouse, a run was canceled) is tried again at the next ten-minute tick:
# nothing upstream changes again before the feeds do, and until then the API would serve the snapshot from before.
# A failed blocking check is not retried: its asset succeeded, and the rows need fixing first.
RETRY_FAILED = (
    dg.AutomationCondition.execution_failed()
    & dg.AutomationCondition.cron_tick_passed("*/10 * * * *")
    & ~dg.AutomationCondition.in_progress()
    & ~dg.AutomationCondition.any_deps_in_progress()
).with_label("failed: again every ten minutes")
ON_CHANGE = ON_CHANGE | RETRY_FAILED
# Runs the daemon starts are run again when their process dies (dagster.yaml). Whole: a run killed while its steps
# waited for the writer pool has no failed step to resume from ("No steps needed to be retried"), and every asset
# here is idempotent (a step that had finished finds nothing left to do).
RETRY_TAGS = {"dagster/max_retries": "2", "dagster/retry_strategy": "ALL_STEPS"}
# A root asset nothing upstream updates (the asset registry, today's prices) runs when it is missing, from the
# sensor's very first evaluation: eager and on_missing skip what is already missing then, and every asset after it
# would wait on it forever in a deployment that only runs the daemon. Once, not at every tick while it fails.
WHEN_MISSING = (
    dg.AutomationCondition.missing().newly_true().since(
        dg.AutomationCondition.newly_requested() | dg.AutomationCondition.newly_updated()
    )
    & ~dg.AutomationCondition.in_progress()
).with_label("missing, first evaluation included")
RAW_FRESHNESS = dg.FreshnessPolicy.time_window(fail_window=timedelta(minutes=30), warn_window=timedelta(minutes=15))

ingest_job = dg.define_asset_job(
    "ingest_feeds", selection=dg.AssetSelection.assets("raw_articles"), description="Poll every enabled feed."
)
refresh_job = dg.define_asset_job(
    "refresh", selection=dg.AssetSelection.all(), description="Ingest every feed and refresh everything downstream."
)
backfill_articles_job = dg.define_asset_job(
    "backfill_articles",
    selection=dg.AssetSelection.assets("crypto_assets", "articles").downstream(),
    description="Re-score and re-tag every article whose model_version or tagger_version is not current, "
    "then re-derive events and publish. Idempotent: a second run finds nothing to do.",
)
FULL_DERIVATION_TAG = "cryptowire/full_derivation"  # a run with it derives every article again, not only the changed
rederive_events_job = dg.define_asset_job(
    "rederive_events",
    selection=dg.AssetSelection.assets("prediction_events").downstream(),
    description="Re-derive prediction events from every current article, not only the changed ones the other runs "
    "derive (ids and created_at are stable), and publish.",
    tags={FULL_DERIVATION_TAG: "1"},
)


@dg.op(pool="duckdb_writer", description="Delete feed_fetches rows older than the retention, then CHECKPOINT the warehouse.")
def prune_and_checkpoint(context: dg.OpExecutionContext, warehouse: WarehouseResource) -> int:
    from pipeline.history import delete_old_fetches
    from warehouse.config import get_settings

    days = get_settings().fetch_log_days
    with warehouse.connect() as con:
        deleted = delete_old_fetches(con, days)
        con.execute("CHECKPOINT")
    context.log.info(f"deleted {deleted} feed_fetches rows older than {days} days; checkpointed")
    return deleted


@dg.op(description="Remove serving snapshots beyond the newest N (the published one is always kept).")
def prune_snapshots(context: dg.OpExecutionContext, snapshots: SnapshotsResource) -> int:
    from pathlib import Path

    from warehouse.publish import prune_snapshots as prune

    removed = prune(Path(snapshots.directory), keep=snapshots.keep)
    context.log.info(f"removed {len(removed)} old snapshot(s)")
    return len(removed)


@dg.op(description="Delete finished Dagster runs older than run_history_days (not those holding an asset's latest "
       "materialization).")
def prune_run_history(context: dg.OpExecutionContext) -> int:
    from pipeline.history import mark_done, prune_runs
    from warehouse.config import get_settings

    settings = get_settings()
    deleted = prune_runs(context.instance, settings.run_history_days)
    mark_done(settings)
    context.log.info(f"deleted {deleted} Dagster runs older than {settings.run_history_days} days")
    return deleted


@dg.job(description="Daily: prune old snapshots, fetch logs and Dagster runs, checkpoint the warehouse.")
def maintenance() -> None:
    prune_and_checkpoint()
    prune_snapshots()
    prune_run_history()


# `articles` per publication day on the workers (`cryptowire worker`, Celery over CRYPTOWIRE_REDIS_URL): a Dagster
# backfill of this job over a date range launches one run per day; each run exports its day, queues it for the
# workers and merges the result (pipeline/backfill.py). The op claims no writer-pool slot: it writes the warehouse
# only for a moment (export, merge) under the data home's materialization lock, and would otherwise hold the slot
# while the workers score.
ARTICLE_DAYS = dg.DailyPartitionsDefinition(start_date="2009-01-03", timezone="UTC", end_offset=1)


@dg.op(description="Score and tag the partition's days of articles on the workers, then merge the results.")
def score_days_on_workers(context: dg.OpExecutionContext) -> dg.Output[None]:
    from datetime import timedelta

    from pipeline.backfill import BackfillTimeout, RedisUnreachable, WorkersIdle, run_backfill
    from pipeline.commands.output import user_errors
    from warehouse.config import get_settings

    window = context.partition_time_window
    since, until = window.start.date(), (window.end - timedelta(days=1)).date()
    settings = get_settings()
    try:
        # Bounded while no worker makes progress: runs waiting on absent workers would fill the instance's
        # max_concurrent_runs and keep `poll_feeds` queued, stopping ingestion.
        report = run_backfill(settings, since, until, say=context.log.info,
                              idle_timeout=settings.worker_wait_seconds)
    except (WorkersIdle, BackfillTimeout, RedisUnreachable, *user_errors()) as exc:
        # the UI shows the text, not "Error occurred while executing op"; any other error is a defect: its traceback stays
        raise dg.Failure(str(exc)) from exc
    if not report.ok:
        failed = [f"{p.day}: {p.error}" for p in report.partitions if p.status != "merged"]
        raise dg.Failure(f"partitions not merged: {'; '.join(failed)}")
    return dg.Output(None, metadata={
        "partitions": len(report.partitions), "articles": report.articles, "merged": report.merged_articles,
        "seconds": report.seconds, "model_version": report.model_version,
        "by_partition": dg.MetadataValue.json([
            {"day": p.day, "articles": p.applied, "worker": p.worker} for p in report.partitions]),
    })


@dg.job(
    partitions_def=ARTICLE_DAYS,
    description="Score and tag `articles` per publication day on Celery workers (`cryptowire worker`); backfill it "
    "over a date range to spread the days over the workers. Same as `cryptowire backfill`.",
)
def articles_on_workers() -> None:
    score_days_on_workers()


_UNFINISHED = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
               dg.DagsterRunStatus.STARTED]


def _poll_feeds(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
    """A poll, unless the last one is still queued or running: with slow feeds (a poll may take the whole fetch
    deadline) and a short cron, polls would pile up in the queue and hold back the downstream runs."""
    busy = context.instance.get_run_records(dg.RunsFilter(job_name=ingest_job.name, statuses=_UNFINISHED), limit=1)
    if busy:
        run = busy[0].dagster_run
        return dg.SkipReason(f"run {run.run_id[:8]} of {ingest_job.name} is still {run.status.value}: this tick "
                             "is skipped so that polls do not pile up")
    return dg.RunRequest(tags=RETRY_TAGS)


def schedules(settings: Settings) -> list[dg.ScheduleDefinition]:
    return [
        dg.ScheduleDefinition(
            name="poll_feeds",
            job=ingest_job,
            cron_schedule=settings.schedule_cron,
            execution_fn=_poll_feeds,
            execution_timezone="UTC",
            default_status=dg.DefaultScheduleStatus.RUNNING,
            description="Poll the feeds (a tick is skipped while the last poll is still queued or running); "
            "downstream assets follow through declarative automation.",
        ),
        dg.ScheduleDefinition(
            name="daily_maintenance",
            job=maintenance,
            cron_schedule="17 3 * * *",
            tags=RETRY_TAGS,
            execution_timezone="UTC",
            default_status=dg.DefaultScheduleStatus.RUNNING,
            description="Every day at 03:17 UTC, the `maintenance` job: prune old snapshots, the feed fetch log "
            "and finished runs' history.",
        ),
    ]


@dg.sensor(
    name="recover_dead_runs",
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Marks runs whose process is gone (killed, evicted, a power cut) as failed and frees the writer "
    "pool slots they hold, so that scheduled runs never wait for a dead one.",
)
def recover_dead_runs(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    from pipeline.recovery import recover

    repairs = recover(context.instance)
    for line in repairs:
        context.log.warning(f"repaired: {line}")
    return dg.SkipReason("; ".join(repairs) or "no dead runs")


automation_sensor = dg.AutomationConditionSensorDefinition(
    "follow_upstream",
    target=dg.AssetSelection.all(),
    run_tags=RETRY_TAGS,
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Materializes downstream assets (articles, events, snapshot) when their upstream changes.",
)
