"""HTML-to-PDF component: ``GET|POST /api/html-to-pdf/{accessKey}`` rendered by a warm Chromium pool."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from starlette.routing import BaseRoute, Route

from api.access import missing_key_routes
from api.errors import ApiError
from api.pdf.endpoint import PATH, STOP_REFUND_SECONDS, PdfEndpoint
from api.pdf.journal import ChargeJournal, recover
from api.pdf.pool import BrowserPool, browser_problem
from api.pdf.refunds import Refunds
from api.pdf.ssrf import Policy
from api.pdf.stop import StopGuard

log = logging.getLogger("cryptowire.pdf")

# At shutdown, refunds of killed servers' charges still being made get this long; the rest wait for the next start.
RECOVERY_WAIT_SECONDS = 15.0


def routes(state: Any) -> list[BaseRoute]:
    return [Route(PATH, PdfEndpoint(state).handle, methods=["GET", "POST"]), *missing_key_routes(PATH, graphql=False)]


async def startup(state: Any) -> None:
    s = state.settings
    policy = Policy(s.pdf_allow_hosts)  # a bad allow entry stops the server here
    state.extras["pdf_policy"] = policy
    pool = BrowserPool(
        s.chromium_path,
        policy,
        concurrency=s.pdf_concurrency,
        queue=s.pdf_queue,
        restart_every=s.pdf_restart_every,
        max_pss_mb=s.pdf_max_memory_mb,
        tmp_dir=s.chromium_tmp_dir,
    )
    state.extras["pdf_pool"] = pool
    guard = StopGuard(refund_seconds=STOP_REFUND_SECONDS)  # held a little past the refunds' bound, for their lines
    guard.install()
    state.extras["pdf_stop"] = guard
    _open_journal(state)
    problem = browser_problem(pool.chromium_path)
    if problem is not None:  # a permanent misconfiguration: said once here, not in a traceback per request
        log.error("PDF rendering is not available: the browser %s; install chromium-headless-shell (or chromium) or "
                  "set CRYPTOWIRE_CHROMIUM_PATH to a Chromium binary, then restart", problem)
    elif s.pdf_prewarm:
        # Launch in the background: the server answers at once; the first PDF request waits for the launch.
        state.extras["pdf_warmup"] = asyncio.get_running_loop().create_task(_warm(pool))


def _open_journal(state: Any) -> None:
    """This process's charge journal, and the refunds of the charges killed servers left open in theirs."""
    # Metering's own refund, which raises when metering is unreachable (``refund`` retries in the background
    # instead, and a journal kept for the next start would then refund it twice). Unmetered access: nothing to do.
    give_back = getattr(state.access, "give_back", None)
    if give_back is None:
        return
    root = state.settings.pdf_charges_dir
    try:
        state.extras["pdf_journal"] = journal = ChargeJournal(root)
        state.extras["pdf_refunds"] = Refunds(state.access, journal)
    except OSError as exc:
        log.warning("pdf: cannot keep a charge journal in %s (%s): a server killed during a render keeps its charge",
                    root, exc)
    # In the background, one journal at a time: the server answers meanwhile (a refund may wait on metering's
    # timeouts), and however many journals killed servers left, only one is open at once.
    state.extras["pdf_recovery"] = asyncio.get_running_loop().create_task(recover(give_back, root))


async def _warm(pool: BrowserPool) -> None:
    try:
        await pool.start()
    except ApiError:  # the pool logged why
        log.warning("chromium did not start; PDF requests will retry the launch")
    except Exception:
        log.exception("chromium did not start; PDF requests will retry the launch")


async def shutdown(state: Any) -> None:
    guard = state.extras.get("pdf_stop")
    if guard is not None:
        guard.uninstall()
    task = state.extras.pop("pdf_warmup", None)
    if task is not None:  # let a launch in progress finish, so that close() can stop what it started
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 30)
    pool = state.extras.pop("pdf_pool", None)
    if pool is not None:
        await pool.close()
    recovery = state.extras.pop("pdf_recovery", None)
    if recovery is not None:  # before metering closes (the app closes it after the components)
        _, late = await asyncio.wait({recovery}, timeout=RECOVERY_WAIT_SECONDS)
        if late:
            recovery.cancel()
            with contextlib.suppress(BaseException):
                await recovery
    refunds = state.extras.pop("pdf_refunds", None)
    if refunds is not None:  # before the journal closes: the refunds still waiting stay open in it
        await refunds.cancel()
    journal = state.extras.pop("pdf_journal", None)
    if journal is not None:
        journal.close()
