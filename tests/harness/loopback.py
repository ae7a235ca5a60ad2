"""An HTTP server on 127.0.0.1 served from a daemon thread: what every stand-in server of the
tests (the replays of Apache Pulsar's endpoints, Alertmanager's webhook receiver, scripted
brokers) is built on, so none of them repeats the threading and shutdown dance."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackHTTP:
    """`handler` served on 127.0.0.1 (a free port by default) once started, by `start()` or
    `with`. Each request runs on its own daemon thread, so a handler that hangs never keeps
    the test process alive; `stop()` may be called more than once."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], port: int = 0) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT`, no trailing slash."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LoopbackHTTP:
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

    def __enter__(self) -> LoopbackHTTP:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
