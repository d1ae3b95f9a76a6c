"""The browser's only way out: a SOCKS5 proxy on 127.0.0.1 that applies the destination policy to every
connection Chromium opens, resolves the name once and connects to the address it checked (no DNS rebinding).

Chromium is launched with ``--proxy-server=socks5://127.0.0.1:PORT`` (loopback not bypassed, local DNS disabled),
so subresources, frames, fetch/XHR, workers, redirect hops, websockets and anything that escapes request
interception all pass through here. Chromium sends host names to SOCKS5 proxies unresolved, so the name it
connects to is the name checked here. Plain TCP is relayed; TLS stays end to end (Chromium checks certificates).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import struct

from api.errors import ApiError
from api.pdf.ssrf import Blocked, DnsFailure, Policy

log = logging.getLogger("cryptowire.pdf")

CONNECT_TIMEOUT = 10.0
HANDSHAKE_TIMEOUT = 5.0
# Once one side of a relayed connection has finished, the other may still move bytes, but a pause this long closes
# both: a server that never answers must not hold a connection (two descriptors) after Chromium gave up on it.
LINGER_SECONDS = 2.0
# A connection on which no byte moved either way for this long is closed: past the longest render (60 s), no page
# can still be waiting for it.
IDLE_SECONDS = 65.0
CLOSE_SECONDS = 5.0  # close() waits this long for the connections it ends
CHUNK = 64 * 1024
# SOCKS5 reply codes (RFC 1928)
OK, FAILURE, NOT_ALLOWED, HOST_UNREACHABLE, REFUSED, TTL, BAD_COMMAND, BAD_ADDRESS = range(8)


class EgressProxy:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.server: asyncio.Server | None = None
        self.port = 0
        self.stats = {"connections": 0, "blocked": 0, "failed": 0}
        self.recent_blocked: list[str] = []  # last few refusals, for logs and tests
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0, limit=64 * 1024)
        self.port = self.server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"socks5://127.0.0.1:{self.port}"

    @property
    def open_connections(self) -> int:
        """Connections being handled now (for tests and health)."""
        return len(self._tasks)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            tasks = list(self._tasks)
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=CLOSE_SECONDS)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), CLOSE_SECONDS)
            self.server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        upstream: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT):
                host, port = await self._handshake(reader, writer)
            try:
                pinned = await self.policy.pin_endpoint(host, port)
            except Blocked as exc:
                self._refuse(writer, NOT_ALLOWED, f"{host}:{port}", exc)
                return
            except (DnsFailure, ApiError) as exc:
                self._refuse(writer, HOST_UNREACHABLE if isinstance(exc, DnsFailure) else NOT_ALLOWED,
                             f"{host}:{port}", exc)
                return
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    up_reader, upstream = await asyncio.open_connection(str(pinned.ip), port)
            except (OSError, TimeoutError) as exc:
                self.stats["failed"] += 1
                log.info("pdf egress: %s:%s (%s) unreachable: %s", host, port, pinned.ip, exc)
                writer.write(_reply(REFUSED))
                await writer.drain()
                return
            self.stats["connections"] += 1
            writer.write(_reply(OK))
            await writer.drain()
            await _relay(reader, writer, up_reader, upstream)
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        except asyncio.CancelledError:
            # Only close() cancels a connection, and nothing awaits this task: ending it cancelled would make
            # asyncio log a traceback per connection ("Exception in callback ... CancelledError").
            pass
        finally:
            for w in (writer, upstream):
                if w is not None:
                    with contextlib.suppress(Exception):
                        w.close()
            if task is not None:
                self._tasks.discard(task)

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> tuple[str, int]:
        version, n = await reader.readexactly(2)
        methods = await reader.readexactly(n)
        if version != 5 or 0 not in methods:
            writer.write(b"\x05\xff")
            raise ValueError("not a SOCKS5 client without authentication")
        writer.write(b"\x05\x00")
        await writer.drain()
        version, command, _, kind = await reader.readexactly(4)
        if kind == 1:
            host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
        elif kind == 4:
            host = str(ipaddress.IPv6Address(await reader.readexactly(16)))
        elif kind == 3:
            (length,) = await reader.readexactly(1)
            host = (await reader.readexactly(length)).decode("ascii", "replace")
        else:
            writer.write(_reply(BAD_ADDRESS))
            raise ValueError("unknown address type")
        (port,) = struct.unpack(">H", await reader.readexactly(2))
        if version != 5 or command != 1:  # only CONNECT: no BIND, no UDP ASSOCIATE
            writer.write(_reply(BAD_COMMAND))
            raise ValueError("unsupported SOCKS command")
        return host, port

    def _refuse(self, writer: asyncio.StreamWriter, code: int, dest: str, exc: ApiError) -> None:
        self.stats["blocked"] += 1
        self.recent_blocked = [*self.recent_blocked[-49:], dest]
        log.info("pdf egress: refused %s (%s)", dest, exc.message)
        writer.write(_reply(code))


def _reply(code: int) -> bytes:
    return b"\x05" + bytes([code]) + b"\x00\x01" + socket.inet_aton("0.0.0.0") + b"\x00\x00"


async def _relay(
    a_reader: asyncio.StreamReader, a_writer: asyncio.StreamWriter,
    b_reader: asyncio.StreamReader, b_writer: asyncio.StreamWriter,
) -> None:
    """Copy bytes both ways until both directions end, one has ended and the other then moved nothing for
    LINGER_SECONDS, or nothing moved either way for IDLE_SECONDS; the caller then closes both sides."""
    loop = asyncio.get_running_loop()
    last = [loop.time()]  # when a byte last moved, either way

    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(CHUNK):
                last[0] = loop.time()
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            last[0] = loop.time()  # the linger of the other direction starts now
            with contextlib.suppress(Exception):
                if dst.can_write_eof():
                    dst.write_eof()

    pending = {asyncio.ensure_future(pipe(a_reader, b_writer)), asyncio.ensure_future(pipe(b_reader, a_writer))}
    try:
        while pending:
            limit = IDLE_SECONDS if len(pending) == 2 else LINGER_SECONDS
            left = last[0] + limit - loop.time()
            if left <= 0:
                return
            _done, pending = await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending)
