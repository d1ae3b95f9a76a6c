"""The poll_feeds schedule on a real (temporary) Dagster instance: a tick is skipped while the last poll is still
queued or running, so that slow feeds and a short cron do not pile polls up in the run queue."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from pipeline.automation import ingest_job, schedules
from pipeline.definitions import defs
from warehouse.config import Settings


# (QUEUED is in the same filter; a queued run needs a code location's origin to be created here)
@pytest.mark.parametrize("status", [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTED])
def test_a_tick_is_skipped_while_the_last_poll_is_unfinished(tmp_path: Path, status: dg.DagsterRunStatus) -> None:
    poll = next(s for s in schedules(Settings(home=tmp_path / "home")) if s.name == "poll_feeds")
    (tmp_path / "dagster").mkdir()
    with dg.DagsterInstance.local_temp(str(tmp_path / "dagster")) as instance:
        assert poll.evaluate_tick(dg.build_schedule_context(instance=instance)).run_requests  # nothing runs: poll

        run = instance.create_run_for_job(defs.resolve_job_def(ingest_job.name), status=status)
        result = poll.evaluate_tick(dg.build_schedule_context(instance=instance))
        assert not result.run_requests
        assert result.skip_message is not None and run.run_id[:8] in result.skip_message
        assert "do not pile up" in result.skip_message

        instance.report_run_failed(run) if status == dg.DagsterRunStatus.STARTED else instance.report_run_canceled(run)
        assert poll.evaluate_tick(dg.build_schedule_context(instance=instance)).run_requests  # finished: poll again


def test_the_ui_names_what_each_automation_does() -> None:
    """The Automation tab shows the conditions' labels: articles runs on a change of its upstream's data, not on
    every poll, so its label must not read as plain "eager" (as it did, from the condition it was built from)."""
    graph = defs.resolve_asset_graph()
    labels = {key.to_user_string(): [c.get_label() for c in (graph.get(key).automation_condition.children or [])]
              for key in graph.get_all_asset_keys() if graph.get(key).automation_condition is not None}
    assert labels["articles"][0] == "eager, on a change of upstream data", labels
    assert "failed: again every ten minutes" in labels["articles"]
    assert labels["stories"][0] == labels["serving_snapshot"][0] == "eager, on a change of upstream data", labels
