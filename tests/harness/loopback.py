"""An HTTP server on a loopback address served from a daemon thread: what every stand-in
server of the tests (the replays of Apache Pulsar's endpoints, Alertmanager's webhook receiver,
scripted brokers and admin RESTs) is built on, so none of them repeats the threading and
shutdown dance."""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class LoopbackHTTP:
    """`handler` served on `host` (127.0.0.1; another 127.x.y.z plays a second machine) and a
    free port by default, over TLS with `context`, once started, by `start()` or `with`. Each
    request runs on its own daemon thread, so a handler that hangs never keeps the test
    process alive; `stop()` may be called more than once."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], port: int = 0, *,
                 host: str = "127.0.0.1", context: ssl.SSLContext | None = None) -> None:
        self.host = host
        self.scheme = "http" if context is None else "https"
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        if context is not None:
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT` (`https` with a context, the host given), no trailing slash."""
        return f"{self.scheme}://{self.host}:{self.port}"

    def start(self) -> Self:
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                        name=f"loopback-http-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        if not self._closed:
            self.httpd.server_close()
            self._closed = True

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
