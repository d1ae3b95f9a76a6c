"""`cryptowire worker` and `cryptowire backfill`: scoring and tagging `articles` per publication day on many
worker processes (Celery over CRYPTOWIRE_REDIS_URL; pipeline/workers.py, pipeline/partitions.py)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import typer

from pipeline.commands.output import emit_json, fail, json_option, user_errors


def _day(value: str, option: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:  # a mistake in the command line: exit 2 with the usage
        raise typer.BadParameter(f"{value!r} is not a date: write it as YYYY-MM-DD", param_hint=option) from None


def _check_redis_url(url: str) -> None:
    from pipeline.workers import check_redis_url

    try:
        check_redis_url(url)
    except ValueError as exc:
        fail(str(exc), code=2)  # a bad setting, as pipeline/cli.py reports the others


def register(app: typer.Typer) -> None:
    @app.command()
    def worker(
        concurrency: int = typer.Option(
            1, "--concurrency", "-c", min=1, help="Partitions scored at once: 1 is one process (the model loaded "
            "once, before the first task); N forks N processes, each loading the model once."
        ),
        threads: int | None = typer.Option(
            None, "--threads", min=1, help="Sentiment inference threads per process (default "
            "CRYPTOWIRE_SENTIMENT_THREADS, 0 = every core)."
        ),
        loglevel: str = typer.Option("INFO", "--loglevel", help="Celery's log level."),
    ) -> None:
        """Start a worker that scores and tags partitions of `articles` (one publication day each) that
        `cryptowire backfill` queues in Redis (CRYPTOWIRE_REDIS_URL). It never opens the warehouse: it reads a
        partition's Parquet export and writes its result as Parquet under the data home
        (CRYPTOWIRE_HOME/partitions, shared by every worker). A worker killed while it holds a partition gives it
        to another worker after CRYPTOWIRE_WORKER_VISIBILITY_TIMEOUT seconds."""
        from pipeline.workers import run_worker
        from warehouse.config import get_settings

        settings = get_settings()
        if not settings.redis_url:
            fail("CRYPTOWIRE_REDIS_URL is not set: a worker takes its partitions from Redis (redis://host:6379/0)")
        _check_redis_url(settings.redis_url)
        settings.partitions_dir.mkdir(parents=True, exist_ok=True)
        run_worker(settings, concurrency=concurrency, threads=threads, loglevel=loglevel)

    @app.command()
    def backfill(
        since: str = typer.Option(..., "--since", help="First publication day (YYYY-MM-DD, UTC)."),
        until: str | None = typer.Option(None, "--until", help="Last publication day, included (default: today, UTC)."),
        timeout: float | None = typer.Option(
            None, "--timeout", min=0, help="Seconds to wait for the workers (default: no limit); what is not done "
            "stays queued, and the same backfill run again merges it."
        ),
        wait_timeout: float | None = typer.Option(
            None, "--wait-timeout", min=0, help="Seconds to wait for a run that holds the warehouse."
        ),
        as_json: bool = json_option(help="Print the result as JSON (for scripts)."),
    ) -> None:
        """Score and tag every article published in [--since, --until] that lacks a score for the current model
        or tags for the current tagger, one partition per day, on the workers (`cryptowire worker`, any number,
        any machine sharing the data home), then merge their results into the warehouse.

        Flow: this command (the single warehouse writer) syncs raw_articles into articles and exports each day's
        work as CRYPTOWIRE_HOME/partitions/DAY/input-ID.parquet; queues one task per day in Redis
        (CRYPTOWIRE_REDIS_URL); each worker writes DAY/result-ID.parquet; this command merges each result as it
        arrives (one transaction per day, idempotent) and waits until every day is merged. Downstream tables
        (asset_sentiment, stories, events, the serving snapshot) follow on the next `cryptowire materialize` or
        through the daemon's automation; `articles` then finds nothing left to score for these days."""
        from pipeline.backfill import BackfillTimeout, RedisUnreachable, run_backfill
        from warehouse.config import get_settings

        first = _day(since, "--since")
        last = _day(until, "--until") if until else datetime.now(UTC).date()
        settings = get_settings()
        if not settings.redis_url:
            fail("CRYPTOWIRE_REDIS_URL is not set: a backfill hands its partitions to workers through Redis "
                 "(redis://host:6379/0); without workers, `cryptowire materialize` scores and tags in-process "
                 "(the registry, the articles and what follows them, then a new snapshot)")
        _check_redis_url(settings.redis_url)

        def say(line: str) -> None:
            typer.echo(line, err=True)

        from kombu.exceptions import OperationalError


        try:
            report = run_backfill(settings, first, last, timeout=timeout, wait_timeout=wait_timeout, say=say)
        except (*user_errors(), BackfillTimeout, RedisUnreachable) as exc:
            fail(str(exc))
            return
        except OperationalError as exc:
            fail(f"cannot reach Redis (CRYPTOWIRE_REDIS_URL): {exc}; start it or fix the URL")
            return
        if as_json:
            emit_json(report.as_dict())
        else:
            typer.echo(f"backfill {report.since}..{report.until}: {len(report.partitions)} partition(s), "
                       f"{report.articles} articles, {report.merged_articles} merged in {report.seconds:.1f} s")
            for p in report.partitions:
                extra = f" ({p.error})" if p.error else f", {p.stale} changed since export" if p.stale else ""
                typer.echo(f"  {p.day}  {p.status:<7} {p.applied:>6} articles  {p.worker or '-'}{extra}")
        if not report.ok:
            raise typer.Exit(1)
