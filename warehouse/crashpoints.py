"""Named points where a test can make the process die as a power cut would (SIGKILL, no clean-up).

``CRYPTOWIRE_CRASH_AT=<name>`` kills the process the first time it reaches ``crash_point(<name>)``. It is read
from the environment directly, not from the settings: it is a fault-injection hook for tests, never configuration.
The names in ``POINTS`` are the places the crash tests kill a run (``tests/test_crash_recovery.py``).
"""

from __future__ import annotations

import os
import signal

POINTS = (
    "ingest:fetched",  # feeds fetched, nothing written yet
    "ingest:writing",  # inside ingest's transaction, before its commit
    "ingest:committed",  # raw_articles committed, the step not yet reported
    "articles:scoring",  # inside the scoring transaction, after the first chunk
    "articles:committed",  # scores and tags committed
    "events:merging",  # inside merge_events' transaction
    "events:committed",  # events committed, the step not yet reported
    "snapshot:writing",  # the new snapshot file half written
    "snapshot:written",  # snapshot complete, CURRENT not yet switched
    "snapshot:published",  # CURRENT switched, old snapshots not yet pruned
)


def crash_point(name: str) -> None:
    if os.environ.get("CRYPTOWIRE_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
