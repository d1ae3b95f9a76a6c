"""One conversion: fetch the page under the policy, render it in a fresh context, print it to PDF.

The main document is fetched here first (redirects followed hop by hop under the policy, each hop resolved once
and connected to the checked address), so an upstream error or a blocked redirect is answered without touching
the browser; the page then navigates to the final URL and gets that document from the interceptor, so relative
links resolve against the right base. Every other request the page makes (subresources, frames, fetch/XHR,
navigations, popups) is intercepted at the context and checked: refused ones are aborted (and counted), allowed
ones continue through the egress proxy (``egress.py``), which checks and pins every connection Chromium opens.
Websockets are refused.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from api.errors import ApiError
from api.pdf.fetch import HOP_BY_HOP, Budget, Fetched, Fetcher
from api.pdf.params import MAX_TIMEOUT_MS, PdfParams
from api.pdf.pool import USER_AGENT, Browser, BrowserPool, Tab
from api.pdf.ssrf import BadUrl, Blocked, Policy, parse_url

log = logging.getLogger("cryptowire.pdf")

ACCEPT_HTML = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
# Response headers not handed to Chromium for the main document: it must render, not download.
MAIN_DROP = HOP_BY_HOP | {"content-disposition"}
# Requests one render may make (the page's own included). Each is checked in this process, on the event loop that
# serves every other request: a page firing tens of thousands (a script in a loop) would stall them all.
MAX_PAGE_REQUESTS = 2_000
# Answers without a body: Chromium would abort the navigation (net::ERR_ABORTED).
NO_CONTENT = (204, 205, 304)
# Stages a render can run out of time in (also named in RENDER_FAILED messages).
FETCHING, OPENING, LOADING, PRINTING = "fetching the page", "opening a page", "loading the page", "printing"


class Crashed(Exception):
    """The browser went away during the render (crash or kill)."""


@dataclass
class Rendered:
    pdf: bytes
    final_url: str
    blocked: list[str] = field(default_factory=list)
    requests: int = 0
    timings: dict[str, float] = field(default_factory=dict)  # stage -> milliseconds, for Server-Timing

    def server_timing(self) -> str:
        return ", ".join(f"{k};dur={v:.0f}" for k, v in self.timings.items())


def upstream_error(fetched: Fetched) -> ApiError:
    reason = f" {fetched.reason}" if fetched.reason else ""
    return ApiError(
        502,
        "UPSTREAM_STATUS",
        f"the page {fetched.url.url} answered HTTP {fetched.status}{reason}; only pages answering below 400 "
        "are rendered",
        headers={"X-Upstream-Status": str(fetched.status)},
    )


def no_content_error(fetched: Fetched) -> ApiError:
    reason = f" {fetched.reason}" if fetched.reason else ""
    return ApiError(
        502, "UPSTREAM_STATUS",
        f"the page {fetched.url.url} answered HTTP {fetched.status}{reason}, which has no content, so there is "
        "nothing to print; render the URL of a page that answers 200 with its content",
        headers={"X-Upstream-Status": str(fetched.status)},
    )


def too_many_requests_error() -> ApiError:
    return ApiError(
        502, "PAGE_TOO_MANY_REQUESTS",
        f"the page made more than {MAX_PAGE_REQUESTS} requests (images, scripts, fetches...), the most one render may "
        "make, and was stopped; render a page that loads fewer resources",
    )


def deadline_error(params: PdfParams, stage: str) -> ApiError:
    """504 with advice that fits the stage that ran out of time and the parameters that can help."""
    if stage == FETCHING:  # before the browser is involved: waitUntil cannot help
        why, fixes = "the page's server answered too slowly", ["try again later"]
    elif stage == LOADING and params.wait_until == "networkidle":
        why = "the page did not go idle (pages that keep polling never do)"
        fixes = ["use waitUntil=load or domcontentloaded"]
    elif stage == LOADING:
        why, fixes = "the page or what it loads (scripts, styles, images) came too slowly", []
        if params.wait_until == "load":  # domcontentloaded does not wait for images
            fixes.append("use waitUntil=domcontentloaded to print without waiting for every image")
    elif stage == PRINTING:
        why, fixes = "the page is too large or complex to print in time", ["print a smaller page"]
    elif stage == OPENING:
        why, fixes = "the renderer was too slow to open a page", ["try again later"]
    else:  # waiting for the selector
        why, fixes = "it did not appear", ["check that `waitForSelector` matches an element of the page"]
    if params.timeout_ms < MAX_TIMEOUT_MS:
        fixes.insert(0, f"raise timeoutMs (at most {MAX_TIMEOUT_MS})")
    return ApiError(
        504,
        "DEADLINE_EXCEEDED",
        f"the page did not finish within timeoutMs={params.timeout_ms} ({stage}): {why}; "
        f"{', or '.join(fixes or ['try again later'])}",
    )


def _fulfil_headers(headers: list[tuple[str, str]], drop: set[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in headers:
        if k in drop:
            continue
        sep = "\n" if k == "set-cookie" else ", "
        out[k] = f"{out[k]}{sep}{v}" if k in out else v
    return out


async def render(pool: BrowserPool, policy: Policy, params: PdfParams, deadline: float) -> Rendered:
    """Render ``params.url``; ``deadline`` is event-loop time. Raises ApiError (502/503/504...)."""
    loop = asyncio.get_running_loop()
    place = pool.take_place()  # 503 BUSY now, before the page is downloaded
    fetcher = Fetcher(policy, USER_AGENT, Budget())
    timings: dict[str, float] = {}
    mark = loop.time()
    try:
        try:
            async with asyncio.timeout_at(deadline):
                # The fetcher's own timeout is a safety net set past the deadline: were it equal, it could fire
                # first on a busy machine and turn a page that never answers into a 502 instead of a 504.
                main = await fetcher.fetch(
                    "GET", params.url, {"accept": ACCEPT_HTML}, timeout=max(0.1, deadline - loop.time()) + 1.0
                )
        except TimeoutError:
            raise deadline_error(params, FETCHING) from None
        timings["fetch"] = (loop.time() - mark) * 1000
        if main.status >= 400:
            raise upstream_error(main)
        if main.status in NO_CONTENT:
            raise no_content_error(main)
        for attempt in (1, 2):
            mark = loop.time()
            async with pool.slot(deadline, place) as browser:
                timings["queue"] = (loop.time() - mark) * 1000
                session = Session(policy, main, deadline, timings)
                try:
                    pdf = await session.run(pool, browser, params)
                    return Rendered(
                        pdf, main.url.url, session.blocked, session.requests, timings
                    )
                except Crashed:
                    # The browser went down under this request (another page, or a kill): once more, on a new one.
                    if attempt == 2 or deadline - loop.time() < 1.0:
                        raise ApiError(
                            502, "RENDERER_CRASHED",
                            "the browser crashed while rendering this page; retry, and if it happens again the "
                            "page itself crashes the browser",
                        ) from None
                    log.warning("chromium crashed during a render; retrying once on a new browser")
        raise AssertionError("unreachable")
    finally:
        pool.leave(place)
        await fetcher.aclose()


class Session:
    """The interception handler of one render, attached to the tab it uses."""

    def __init__(self, policy: Policy, main: Fetched, deadline: float, timings: dict[str, float]) -> None:
        self.policy = policy
        self._checked: dict[tuple[str, int], ApiError | None] = {}
        self.requests = 0
        self.timings = timings
        self.main = main
        self.deadline = deadline
        self.blocked: list[str] = []
        self.page: Any = None
        self.main_served = False
        self.page_crashed = False
        self.navigated_away: str | None = None  # set when the page tried to replace itself with a blocked URL
        self.navigation_failed: tuple[str, str] | None = None  # (url, error) of a later main-frame load that failed
        self.stage = OPENING
        self.too_many = False  # the page went past MAX_PAGE_REQUESTS: it is stopped and the render fails
        self.download: str | None = None  # the URL of a download the page turned into: it is stopped, the render fails
        self.navigations: set[str] = set()  # URLs the main frame was sent to after the page asked for (on_route)
        self._closing: asyncio.Future[None] | None = None  # the page's close, once too_many
        self._handlers: set[asyncio.Task[Any]] = set()

    def remaining(self) -> float:
        return max(0.05, self.deadline - asyncio.get_running_loop().time())

    def _lap(self, name: str) -> None:
        now = asyncio.get_running_loop().time()
        self.timings[name] = (now - self._mark) * 1000
        self._mark = now

    async def run(self, pool: BrowserPool, browser: Browser, params: PdfParams) -> bytes:
        tab: Tab | None = None
        self._mark = asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout_at(self.deadline):
                try:
                    tab = await pool.new_tab(browser)
                    tab.handler = self
                    self.page = tab.page
                    if tab.media != params.emulate_media_type:
                        await tab.page.emulate_media(media=params.emulate_media_type)
                        tab.media = params.emulate_media_type
                    self._lap("tab")
                    self.stage = LOADING
                    fragment = f"#{params.url.fragment}" if params.url.fragment else ""
                    await tab.page.goto(
                        self.main.url.url + fragment, wait_until=params.wait_until, timeout=self.remaining() * 1000
                    )
                    if params.wait_for_selector:
                        self.stage = f"waiting for {params.wait_for_selector!r}"
                        await tab.page.wait_for_selector(params.wait_for_selector, timeout=self.remaining() * 1000)
                    self._lap("load")
                    self.stage = PRINTING
                    pdf = await tab.page.pdf(**_pdf_options(params))
                    self._lap("pdf")
                    await self._refuse_error_page()  # the PDF would show the browser's error page, not the page
                    if self.too_many:  # printed before the close took effect: a page cut short
                        raise too_many_requests_error()
                    return pdf
                except TimeoutError:
                    raise
                except Exception as exc:
                    raise self._classify(exc, browser, params) from None
        except TimeoutError:
            raise deadline_error(params, self.stage) from None
        finally:
            for t in list(self._handlers):
                t.cancel()
            if tab is not None and browser.alive:
                pool.discard(browser, tab)

    async def on_route(self, route: Any) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        request = route.request
        self.requests += 1
        try:
            if self.requests > MAX_PAGE_REQUESTS:
                await self._too_many(route)
                return
            if not self.main_served and request.is_navigation_request() and request.frame == self.page.main_frame:
                self.main_served = True
                main = self.main
                await route.fulfill(status=main.status, headers=_fulfil_headers(main.headers, MAIN_DROP), body=main.body)
                return
            url = request.url
            if not url.lower().startswith(("http://", "https://")):
                self.blocked.append(url[:200])
                await route.abort("blockedbyclient")
                return
            try:
                await self._check(url)
            except (Blocked, BadUrl) as exc:
                self.blocked.append(url[:200])
                log.info("pdf: blocked %s (%s)", url[:200], exc.message)
                if request.is_navigation_request() and request.frame == self.page.main_frame:
                    self.navigated_away = f"the page navigated to {url[:200]}, which is refused: {exc.message}"
                await route.abort("blockedbyclient")
                return
            except ApiError as exc:
                log.info("pdf: %s failed (%s)", url[:200], exc.message)
                await route.abort("namenotresolved" if exc.code == "DNS_FAILURE" else "failed")
                return
            if request.is_navigation_request() and request.frame == self.page.main_frame:
                self.navigations.add(url)  # it may turn into a download (on_download)
            # Chromium fetches it natively through the egress proxy, which checks and pins the connection
            # again (this check only refuses early, and counts): bodies never cross the driver pipe.
            await route.continue_()
        except Exception as exc:  # the context closed under us (deadline, crash): nothing left to answer
            log.debug("pdf: route handler for %s ended: %s", request.url[:200], exc)
        finally:
            if task is not None:
                self._handlers.discard(task)

    async def _too_many(self, route: Any) -> None:
        """Refuse the request; the first time, also close the page, so that its scripts stop firing more and
        Playwright drops those still queued instead of handing each to Python (the render then fails with
        PAGE_TOO_MANY_REQUESTS)."""
        if not self.too_many:
            self.too_many = True
            log.info("pdf: the page made more than %d requests; stopping it", MAX_PAGE_REQUESTS)
            closing = asyncio.ensure_future(self.page.close())  # before the abort's round trip, not after it
            closing.add_done_callback(_retrieved)
            self._closing = closing
        await route.abort("blockedbyclient")  # every route must be answered, or Playwright's task never ends

    async def _check(self, raw: str) -> None:
        url = parse_url(raw, f"request {raw[:200]}")
        key = (url.host, url.port)
        if key not in self._checked:  # one lookup per host and port per render
            try:
                await self.policy.pin(url)
                self._checked[key] = None
            except ApiError as exc:
                self._checked[key] = exc
        if self._checked[key] is not None:
            raise self._checked[key]

    async def on_websocket(self, ws: Any) -> None:
        self.blocked.append(ws.url[:200])
        try:
            await ws.close(code=1008, reason="websockets are not available while rendering PDFs")
        except Exception:
            pass

    def on_crash(self) -> None:
        self.page_crashed = True

    def on_download(self, download: Any) -> None:
        """The page turned into a download while loading (a script's ``location.href`` to a file, say): the load it
        replaced never ends, so the render would wait for the deadline; stop the page now (NOT_A_PAGE). A download
        in a frame, or once the page has loaded, is cancelled (downloads are off) and the page prints as it is."""
        url = str(download.url)
        if self.download is None and self.stage == LOADING and url in self.navigations:
            self.download = url[:200]
            closing = asyncio.ensure_future(self.page.close())
            closing.add_done_callback(_retrieved)

    def on_request_failed(self, request: Any) -> None:
        try:
            if self.main_served and request.is_navigation_request() and request.frame == self.page.main_frame:
                self.navigation_failed = (request.url[:200], request.failure or "failed")
        except Exception as exc:  # the page closed under us
            log.debug("pdf: requestfailed for %s: %s", request.url[:200], exc)

    async def _refuse_error_page(self) -> None:
        """The page replaced itself with a URL the interceptor refused, or one that failed to load: a redirect hop
        of a later navigation is not intercepted, and the egress proxy refuses it, so Chromium shows its error
        page. Neither is the page asked for: 403 when the policy refuses where the load went, else 502."""
        if self.navigated_away:
            raise Blocked(self.navigated_away)
        if self.navigation_failed and self.page.main_frame.url.startswith("chrome-error:"):
            url, error = self.navigation_failed
            try:
                await self._check(url)  # the check the egress proxy made
            except (Blocked, BadUrl) as exc:
                raise Blocked(f"the page navigated to {url}, which is refused: {exc.message}") from None
            except ApiError:
                pass  # a name that does not resolve, and the like: the load failed
            raise ApiError(502, "RENDER_FAILED", f"the page navigated to {url}, which failed to load ({error}); "
                           "there is nothing to print")

    def _classify(self, exc: Exception, browser: Browser, params: PdfParams) -> Exception:
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        if isinstance(exc, PlaywrightTimeout):
            return deadline_error(params, self.stage)
        if isinstance(exc, ApiError):
            return exc
        if not browser.alive:
            return Crashed()
        if self.too_many:
            return too_many_requests_error()
        if self.download:
            return ApiError(502, "NOT_A_PAGE", f"the page started a download ({self.download}) instead of showing "
                            "something to print")
        if self.navigated_away:
            return Blocked(self.navigated_away)
        if self.page_crashed:
            return ApiError(502, "RENDERER_CRASHED", "the page crashed the renderer (out of memory or a browser bug)")
        text = str(exc).split("\n", 1)[0][:300]
        if self.stage.startswith("waiting for") and any(m in text for m in _SELECTOR_SYNTAX):
            return ApiError(400, "INVALID_PARAMETER", f"`waitForSelector` is not a valid selector ({text}); give a "
                            "CSS selector such as `main h1` or `#chart`")
        if "Download is starting" in text:
            return ApiError(502, "NOT_A_PAGE", "the URL answers with a download, not a page that can be printed")
        log.warning("pdf: render failed while %s: %s", self.stage, text)
        return ApiError(502, "RENDER_FAILED", f"rendering failed while {self.stage}: {text}")


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Done callback of a task nobody awaits: its failure (the page was gone already) is not worth a log line."""
    if not task.cancelled():
        task.exception()


# How Playwright words a selector it cannot parse: the caller's mistake (400), not a failed render.
_SELECTOR_SYNTAX = ("Unexpected token", "is not a valid selector", "Unknown engine", "Malformed selector",
                    "Unexpected end of selector", "is not a valid XPath expression")


def _pdf_options(params: PdfParams) -> dict[str, Any]:
    options: dict[str, Any] = {
        "format": params.format,
        "landscape": params.landscape,
        "print_background": params.print_background,
        "scale": params.scale,
    }
    if params.margin:
        top, right, bottom, left = params.margin
        options["margin"] = {"top": top, "right": right, "bottom": bottom, "left": left}
    return options
