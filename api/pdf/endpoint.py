"""``GET|POST /api/html-to-pdf/{accessKey}``: authenticate, validate, check the destination, charge, render."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from accounts.access import log_lost_refund
from accounts.limits import MeteringUnavailable
from api import bodies
from api.access import Caller, Charge
from api.errors import ApiError
from api.pdf.filename import content_disposition
from api.pdf.journal import ChargeJournal, Entry
from api.pdf.params import PdfParams, parse_params
from api.pdf.pool import BrowserPool
from api.pdf.render import render
from api.pdf.ssrf import Policy
from api.pdf.stop import StopGuard, stopped_error

log = logging.getLogger("cryptowire.pdf")

PATH = "/api/html-to-pdf/{accessKey}"
MAX_BODY = 16 * 1024
COST = 20_000  # compute units per conversion
# A request cancelled after its charge (a forced stop of the server) refunds within this, or logs that it could not.
STOP_REFUND_SECONDS = 5.0


def _requests(n: int) -> str:
    return f"{n} PDF request" + ("" if n == 1 else "s")


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``bodies.once_each``, as this endpoint's documented INVALID_PARAMETER (as in the query string)."""
    try:
        return bodies.once_each(pairs)
    except ValueError as exc:
        raise ApiError(400, "INVALID_PARAMETER", str(exc)) from None


async def read_raw(request: Request) -> dict[str, Any]:
    """The raw parameters: the query string on GET, the JSON object body on POST."""
    if request.method == "GET":
        raw: dict[str, Any] = {}
        for k, v in request.query_params.multi_items():
            if k in raw:
                raise ApiError(400, "INVALID_PARAMETER", f"`{k}` is given more than once; give it once")
            raw[k] = v
        return raw
    if request.query_params:
        raise ApiError(400, "INVALID_PARAMETER", "on POST send every parameter in the JSON body, not the query string")
    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype != "application/json":
        raise ApiError(
            415, "UNSUPPORTED_MEDIA_TYPE",
            f"POST bodies must be JSON: send Content-Type: application/json (got {ctype or 'none'!r})",
        )
    too_big = ApiError(413, "BODY_TOO_LARGE", f"the request body is larger than {MAX_BODY} bytes")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise too_big
    body = await bodies.read(request, MAX_BODY, too_big)
    try:
        data = bodies.loads(body, object_pairs_hook=_once_each)
    except ValueError as exc:
        raise ApiError(400, "INVALID_JSON", f"the body is not valid JSON ({exc}); send an object like "
                       "{\"url\": \"https://…\"}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "INVALID_JSON", "the body must be a JSON object like {\"url\": \"https://…\"}")
    return data


async def refund_at_stop(access: Any, charge: Charge, deadline: float, journal: ChargeJournal | None = None,
                         entry: Entry | None = None) -> None:
    """Refund a charge at a forced stop by the loop time ``deadline``, the process exiting right after. Metering's
    own refund is used (``give_back``: ``refund`` would only schedule a retry, which never runs before the exit);
    when metering is unavailable, the charge is reopened in the journal (its ``settled`` line was written first)
    for the next start to refund, or, without a journal, the line docs/metering.md promises is logged."""
    give_back = getattr(access, "give_back", None)
    if give_back is None:  # unmetered access: nothing to give back
        await access.refund(charge)
        return
    if charge.cost == 0 or charge.info.get("refunded"):
        return
    charge.info["refunded"] = True  # never tried twice by this process: a reopened charge is the next start's
    left = deadline - asyncio.get_running_loop().time()
    try:
        if left <= 0:  # the render's cleanup took the stop's whole refund time: nothing was asked of metering
            raise MeteringUnavailable("no time was left to ask metering before the server exits")
        async with asyncio.timeout(left):
            # the store's own bound ends first (its call runs in a worker thread), so that a refused refund is
            # known as refused and reopened, not taken for unanswered
            await give_back(charge, within=left - min(1.0, left / 4))
    except MeteringUnavailable as exc:
        _reopen(journal, entry, charge, str(exc))
    except TimeoutError:
        # Asked but not answered: metering may yet take it, so it is not reopened (a second refund by the next
        # start would give it back twice); the operator checks the usage.
        log_lost_refund(charge, f"metering did not answer within {STOP_REFUND_SECONDS:g} s of the stop, so whether "
                        "it took the refund is unknown")
    except asyncio.CancelledError:
        log_lost_refund(charge, "the refund was cancelled too, so whether metering took it is unknown")
        raise
    except Exception as exc:
        log_lost_refund(charge, f"{type(exc).__name__}: {exc}")
    else:
        log.warning("pdf: a render was cancelled (the server is stopping); its %d CU were refunded", charge.cost)


def _reopen(journal: ChargeJournal | None, entry: Entry | None, charge: Charge, why: str) -> None:
    """Metering took no refund: record the charge as open again (its ``charged`` line anew, as ``recover`` does),
    so that the next start on this data home refunds it; else the ERROR line for a manual credit."""
    again = journal.charged(charge, reopened="stop") if journal is not None and entry is not None else None
    if again is None:
        log_lost_refund(charge, f"metering unavailable ({why}) and no charge journal holds it")
        return
    log.error("pdf: a render was cancelled (the server is stopping) and its %d CU (key %s, day %s, api %s) could not "
              "be refunded now (metering unavailable: %s); the charge is left open in %s: the next server to start "
              "on this data home refunds it", charge.cost, charge.caller.key_id, charge.info.get("day", "?"),
              charge.caller.api, why, again.file.path)


class PdfResponse(Response):
    """The PDF; ``sent`` is called once it was handed to the connection, or sending it failed (a client that hung
    up is charged: the work was done)."""

    def __init__(self, content: bytes, headers: dict[str, str], sent: Callable[[], object]) -> None:
        super().__init__(content, media_type="application/pdf", headers=headers)
        self._sent = sent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._sent()


class PdfEndpoint:
    def __init__(self, state: Any) -> None:
        self.state = state
        self.in_progress: dict[str, int] = {}  # key id -> requests of that key past the key check, not answered yet

    @property
    def pool(self) -> BrowserPool:
        return self.state.extras["pdf_pool"]

    @property
    def policy(self) -> Policy:
        return self.state.extras["pdf_policy"]

    @property
    def guard(self) -> StopGuard:
        return self.state.extras["pdf_stop"]

    @property
    def journal(self) -> ChargeJournal | None:
        return self.state.extras.get("pdf_journal")  # None: unmetered, or the data home cannot hold it

    async def _refund(self, access: Any, charge: Charge, entry: Entry | None, at_stop: bool) -> None:
        """Refund ``charge``, its journal entry settled first: a kill from here on loses the refund, never makes it
        twice (the next start refunds only charges without a settled line)."""
        journal = self.journal
        if journal is not None and not journal.settled(entry, "refunded"):
            log.error("refund of %d CU to key %s (day %s, api %s) left to the next start of a server on this data "
                      "home: the charge journal could not be written", charge.cost, charge.caller.key_id,
                      charge.info.get("day", "?"), charge.caller.api)
            return
        if at_stop:  # bounded, reopened or logged: the process exits right after
            await refund_at_stop(access, charge, self.guard.refund_deadline(), journal, entry)
        elif (refunds := self.state.extras.get("pdf_refunds")) is not None and entry is not None:
            await refunds.refund(charge)  # kept open in the journal while metering is unavailable
        else:
            await access.refund(charge)

    def _hold(self, caller: Caller) -> str:
        """Count a request of ``caller``'s key in progress, or refuse it (429) when the key has ``pdf_per_key``
        already: failed renders are refunded, so one key's slow pages could otherwise take every renderer and
        every place in line from the other keys at no cost to it."""
        limit = self.state.settings.pdf_per_key
        key = caller.key_id
        busy = self.in_progress.get(key, 0)
        if busy >= limit:
            raise ApiError(
                429, "TOO_MANY_PDF_REQUESTS",
                f"this key already has {_requests(busy)} in progress on this server (at most {limit} at once per "
                "key, CRYPTOWIRE_PDF_PER_KEY): wait for one to finish, then retry",
                {"Retry-After": "5"},
            )
        self.in_progress[key] = busy + 1
        return key

    def _release(self, key: str) -> None:
        left = self.in_progress.get(key, 1) - 1
        if left > 0:
            self.in_progress[key] = left
        else:
            self.in_progress.pop(key, None)

    async def handle(self, request: Request) -> Response:
        return await self._handle(request, self.state.access, self.guard)

    async def _handle(self, request: Request, access: Any, guard: StopGuard) -> Response:
        loop = asyncio.get_running_loop()
        caller: Caller | None = None
        charge: Charge | None = None
        entry: Entry | None = None
        journal = self.journal
        entered = False  # in the guard's count: from just before the charge until it is settled
        held: str | None = None  # the key id counted in ``in_progress``
        try:
            try:
                if request.method == "HEAD":  # Starlette routes HEAD with GET; a render only for its headers is waste
                    raise ApiError(405, "METHOD_NOT_ALLOWED", "use GET or POST to render a page",
                                   {"Allow": "GET, POST"})
                caller = await access.check(request.path_params["accessKey"], "pdf")
                if access.metered:  # unmetered (StaticKeys): nothing free to abuse, and every key is one caller
                    held = self._hold(caller)
                params: PdfParams = parse_params(await read_raw(request), self.state.settings.pdf_timeout_ms)
                deadline = loop.time() + params.timeout_ms / 1000
                try:
                    async with asyncio.timeout_at(deadline):
                        await self.policy.pin(params.url)  # 403 / 502 (DNS) before anything is charged
                except TimeoutError:
                    raise ApiError(502, "DNS_FAILURE", f"resolving {params.url.host!r} took too long") from None
                if guard.stopping.is_set():
                    raise stopped_error()
                # No await since the check: a forced stop from here on waits for this charge to be settled (one
                # before it was refused above; a request not charged yet never holds a stop).
                guard.enter()
                entered = True
                charge = await access.reserve(caller, COST)
                if journal is not None:  # at once: no await between the charge and its line
                    entry = journal.charged(charge)
                result = await guard.run(render(self.pool, self.policy, params, deadline))
            except ApiError as exc:
                if charge is not None:
                    await self._refund(access, charge, entry, at_stop=guard.stopping.is_set())
                return exc.rest_response(access.headers(caller, None))  # refunded: nothing charged
            except Exception:
                log.exception("pdf: unexpected failure")
                if charge is not None:
                    await self._refund(access, charge, entry, at_stop=guard.stopping.is_set())
                err = ApiError(500, "INTERNAL", "the PDF could not be produced because of an internal error; retry")
                return err.rest_response(access.headers(caller, None))
            except asyncio.CancelledError:  # a forced stop of the server: no answer will be sent
                if charge is not None:
                    await self._refund(access, charge, entry, at_stop=True)
                raise
        finally:
            if entered:
                guard.leave()
            if held is not None:
                self._release(held)
        disposition, _name = content_disposition(params.disposition, params.filename, params.url.host)
        headers = {
            **access.headers(caller, charge),
            "Content-Disposition": disposition,
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
            "X-PDF-Blocked-Requests": str(len(result.blocked)),
            "Server-Timing": result.server_timing(),
        }
        # Settled once handed to the connection: a kill before that refunds it (the client got no PDF).
        return PdfResponse(result.pdf, headers, sent=lambda: journal is None or journal.settled(entry, "delivered"))
