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
    "parts:writing",  # a new part of a closed period half written (partitioned sets, warehouse.parts)
    "parts:written",  # the set's new closed parts complete, its head not yet written
    "snapshot:writing",  # the new snapshot file (a set's head part) half written
    "snapshot:written",  # snapshot complete (a set's manifest written), CURRENT not yet switched
    "snapshot:published",  # CURRENT switched, old snapshots not yet pruned
)


def crash_point(name: str) -> None:
    if os.environ.get("CRYPTOWIRE_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
