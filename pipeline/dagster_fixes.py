"""A fix to Dagster 1.13's step executor, applied on import (the version is pinned in pyproject.toml).

``InstanceConcurrencyContext.interval_to_next_pending_claim_check`` returns ``min(0, ...)``, never a positive
interval, so a step waiting for a pool slot makes its executor poll the instance storage in a loop at 100 % of a
core. The fix returns the time until the next claim check is due.
"""

from __future__ import annotations

import time

from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext


def _interval_to_next_pending_claim_check(self: InstanceConcurrencyContext) -> float:
    if not self._pending_claims or not self._pending_timeouts:
        return 0.0
    return max(0.0, min(self._pending_timeouts.values()) - time.time())


InstanceConcurrencyContext.interval_to_next_pending_claim_check = _interval_to_next_pending_claim_check  # type: ignore[method-assign]
