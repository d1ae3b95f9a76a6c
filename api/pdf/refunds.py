"""A failed render's refund while metering is unavailable: kept open in the charge journal until it is made.

``access.refund`` alone retries in the background, and a stop of the server before metering answers again loses
the refund (only an ERROR line says so). Here the charge is reopened in this process's journal (``charged``
again) while it waits, and each retry settles it first, as every refund does: a stop (clean or forced) or a kill
while it waits leaves it open, and the next server to start on the data home refunds it, once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from accounts.access import REFUND_RETRY_FIRST, REFUND_RETRY_MAX, log_lost_refund
from accounts.limits import MeteringUnavailable
from api.access import Charge
from api.pdf.journal import ChargeJournal, Entry

log = logging.getLogger("cryptowire.pdf")
# The longest one refund attempt waits for metering (SQLite's write lock held elsewhere). Its journal entry is
# settled during the attempt, so a kill then loses the refund: the window is kept this short.
ATTEMPT_SECONDS = 1.0


class Refunds:
    """This process's refunds waiting for metering; ``cancel`` at shutdown, before the journal closes."""

    def __init__(self, access: Any, journal: ChargeJournal) -> None:
        self.access = access
        self.journal = journal
        self._tasks: set[asyncio.Task[bool]] = set()
        self._attempting: set[asyncio.Task[bool]] = set()  # asking metering now: its entry is settled meanwhile
        self._closing = False

    async def refund(self, charge: Charge) -> None:
        """Refund ``charge``, whose journal entry was settled; when metering refuses, reopen it and retry."""
        if charge.cost == 0 or charge.info.get("refunded"):
            return
        charge.info["refunded"] = True
        try:
            await self.access.give_back(charge, within=ATTEMPT_SECONDS)
            return
        except MeteringUnavailable as exc:
            why = str(exc)
        entry = self.journal.charged(charge, reopened="retry")
        if entry is None:  # the journal cannot hold it: metering's own retry, as without a journal
            charge.info["refunded"] = False
            await self.access.refund(charge)
            return
        log.warning("pdf: refund of %d CU to key %s deferred (%s); the charge stays open in %s until it is made",
                    charge.cost, charge.caller.key_id, why, entry.file.path)
        task = asyncio.get_running_loop().create_task(self._retry(charge, entry))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _retry(self, charge: Charge, entry: Entry) -> bool:
        """Retry until metering takes it (True), or until the journal holds it open again at a stop (False)."""
        delay = REFUND_RETRY_FIRST
        while True:
            await asyncio.sleep(delay)  # a stop cancels it here: the charge stays open for the next start
            if not self.journal.settled(entry, "refunded"):
                return False  # logged; the journal still holds it open, so the next start refunds it
            task = asyncio.current_task()
            assert task is not None
            self._attempting.add(task)
            try:
                await self.access.give_back(charge, within=ATTEMPT_SECONDS)
            except MeteringUnavailable:
                again = self.journal.charged(charge, reopened="retry")
                if again is None:
                    log_lost_refund(charge, "metering was unavailable and the charge journal could not hold it")
                    return False
                if self._closing:  # open again for the next start
                    return False
                entry = again
                delay = min(delay * 2, REFUND_RETRY_MAX)
                continue
            finally:
                self._attempting.discard(task)
            log.info("pdf: deferred refund of %d CU to key %s done", charge.cost, charge.caller.key_id)
            return True

    async def cancel(self) -> None:
        """Stop waiting: the charges still open stay in the journal, for the next start. An attempt under way is let
        finish (at most ``ATTEMPT_SECONDS``): cancelled, its settled entry would be neither refunded nor reopened."""
        self._closing = True
        tasks = list(self._tasks)
        for task in tasks:
            if task not in self._attempting:
                task.cancel()
        left = sum(1 for done in await asyncio.gather(*tasks, return_exceptions=True) if done is not True)
        if left:
            log.warning("pdf: %d deferred refund(s) left open in the charge journal for the next start", left)
