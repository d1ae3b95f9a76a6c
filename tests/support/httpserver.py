"""A real HTTP server on 127.0.0.1 whose routes tests program, and which logs every request it gets."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


# A handler gets the request and returns a Reply, or writes the response itself and returns None.
Handler = Callable[["RequestHandler"], Reply | None]


class RequestHandler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet
        return

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.owner.seen.append(
            Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        )
        path = self.path.split("?", 1)[0]
        handler = self.server.owner.routes.get(path)
        if handler is None:
            reply: Reply | None = Reply(404, b"not found", {"Content-Type": "text/plain"})
        else:
            reply = handler(self)
        if reply is None:
            return
        try:
            self.send_response(reply.status)
            headers = {"Content-Length": str(len(reply.body)), **reply.headers}
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(reply.body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_GET = do_POST = do_HEAD = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # many clients connecting at once must not be dropped by the listen backlog
    owner: LocalServer


class LocalServer:
    """``with LocalServer() as srv: srv.routes["/feed.xml"] = lambda req: Reply(200, data)``; ``srv.url("/feed.xml")``."""

    def __init__(self) -> None:
        self.routes: dict[str, Handler] = {}
        self.seen: list[Seen] = []
        self._server = _Server(("127.0.0.1", 0), RequestHandler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def hits(self, path: str) -> int:
        return sum(1 for s in self.seen if s.path.split("?", 1)[0] == path)

    def start(self) -> LocalServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def static(body: bytes | str, content_type: str = "text/html; charset=utf-8", status: int = 200) -> Handler:
    data = body.encode() if isinstance(body, str) else body
    return lambda req: Reply(status, data, {"Content-Type": content_type})


def hang(seconds: float = 30.0) -> Handler:
    """A route that accepts the connection and never answers (within ``seconds``)."""

    def handler(req: RequestHandler) -> None:
        time.sleep(seconds)
        return None

    return handler


def sequence(*handlers: Handler) -> Handler:
    """The n-th request gets the n-th handler; once they run out, the last one answers every request."""
    calls = iter(range(1 << 30))
    lock = threading.Lock()

    def handler(req: RequestHandler) -> Reply | None:
        with lock:
            n = next(calls)
        return handlers[min(n, len(handlers) - 1)](req)

    return handler


def redirect(location: str, status: int = 302) -> Handler:
    return lambda req: Reply(status, b"", {"Location": location})


def conditional(
    body: bytes | str,
    etag: str | None = None,
    last_modified: str | None = None,
    content_type: str = "application/rss+xml; charset=utf-8",
) -> Handler:
    """A document served with validators; a request carrying a matching one gets 304 Not Modified."""
    data = body.encode() if isinstance(body, str) else body

    def handler(req: RequestHandler) -> Reply:
        headers = {"Content-Type": content_type}
        if etag:
            headers["ETag"] = etag
        if last_modified:
            headers["Last-Modified"] = last_modified
        if (etag and req.headers.get("If-None-Match") == etag) or (
            last_modified and not etag and req.headers.get("If-Modified-Since") == last_modified
        ):
            return Reply(304, b"", {k: v for k, v in headers.items() if k != "Content-Type"})
        return Reply(200, data, headers)

    return handler


def endless(head: bytes, chunk: bytes, total: int, content_type: str = "application/rss+xml") -> Handler:
    """A body of ``total`` bytes (``head`` then ``chunk`` repeated), streamed without building it in memory.

    Stops quietly when the client hangs up (as a client that caps the body size will).
    """

    def handler(req: RequestHandler) -> None:
        try:
            req.send_response(200)
            req.send_header("Content-Type", content_type)
            req.send_header("Content-Length", str(total))
            req.end_headers()
            req.wfile.write(head)
            sent = len(head)
            while sent < total:
                piece = chunk[: total - sent]
                req.wfile.write(piece)
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass
        req.close_connection = True
        return None

    return handler
