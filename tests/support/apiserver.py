"""The real API app served by uvicorn on 127.0.0.1 in a background thread."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn

from tests.support.servers import free_port

__all__ = ["ApiServer", "free_port"]


class ApiServer:
    """``with ApiServer(create_app(settings)) as srv: httpx.post(srv.url("/crypto-news/KEY"), ...)``"""

    def __init__(self, app: Any, port: int | None = None) -> None:
        self.port = port or free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, daemon=True)

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> ApiServer:
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the API server failed to start (see the log above)")
            if time.monotonic() > deadline:
                raise TimeoutError("the API server did not start within 60 s")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=30)


PDF_PATH = "/api/html-to-pdf/k"  # the PDF endpoint under the test key "k"


@dataclass
class PdfEnv:
    """An app serving the PDF endpoint under the key "k"; each PDF test module adds the page servers it needs."""

    api: ApiServer
    app: Any

    def get(self, timeout: float = 60, **params: Any) -> httpx.Response:
        return httpx.get(self.api.url(PDF_PATH), params=params, timeout=timeout)

    @property
    def pool(self) -> Any:
        return self.app.state.cw.extras["pdf_pool"]
