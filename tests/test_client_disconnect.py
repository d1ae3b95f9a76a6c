"""A client that hangs up before its POST body has arrived: an ordinary event, not an internal failure. The real
server logs no ERROR or traceback for it, charges nothing, and goes on answering."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx

from tests.support.pdfserver import ServeProcess, new_key, used


def _hang_up_mid_body(port: int, path: str) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall((f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   "Content-Length: 1000\r\n\r\n{\"query\": \"{ cry").encode())
        time.sleep(0.3)  # the server is reading the body


def test_a_client_hanging_up_mid_body_is_no_error_and_costs_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    key_id, key = new_key(home, "disconnect")
    server = ServeProcess(home, 9, prewarm=False)
    try:
        for path in (f"/crypto-news/{key}", f"/api/html-to-pdf/{key}"):
            _hang_up_mid_body(server.port, path)
        time.sleep(0.5)
        assert httpx.get(server.url("/healthz"), timeout=5).status_code == 200
    finally:
        server.stop()
    out = server.output()
    assert "Traceback" not in out and "ERROR" not in out, out
    assert used(home, key_id) == 0
