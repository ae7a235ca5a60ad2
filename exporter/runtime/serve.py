"""`run`: the exporter as a service: the check loop, the usage exchange's own timer, the
HTTP server, signals (SIGTERM/SIGINT stop, SIGHUP reloads) and a clean stop."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable

from exporter.config.reload import ConfigFile
from exporter.config.settings import Config
from exporter.pipeline.spark import archivemake
from exporter.runtime.assembly import CycleRecorder, assemble
from exporter.runtime.cycle import Exporter
from exporter.server.http import build_server
from exporter.server.limits import Limits
from exporter.server.webconfig import WebSource

log = logging.getLogger(__name__)


def _exchange_rounds(exporter: Exporter, stop: threading.Event) -> threading.Thread:
    """Run `exchange_round` every report_interval until `stop` is set (a reload may change
    the interval, or bring an exchange where there was none)."""

    def loop() -> None:
        while not stop.wait(exporter.config.resource_group_engine.report_interval):
            try:
                exporter.exchange_round()
            except Exception:
                log.exception("usage-report round failed")

    thread = threading.Thread(target=loop, name="usage-exchange", daemon=True)
    thread.start()
    return thread


def run(config: Config, *, ready: Callable[[str], None] = lambda url: None,
        stop: threading.Event | None = None, config_file: ConfigFile | None = None,
        recorder: CycleRecorder | None = None, limits: Limits | None = None,
        metrics_path: str = "/metrics", web: WebSource | None = None) -> int:
    """Serve until SIGTERM/SIGINT (or `stop` is set); reload `config_file` on SIGHUP or
    when it changes. `web`: the --web.config.file's, else exposition.tls and basic_auth.
    Returns the exit status."""
    from exporter.runtime.scheduler import Scheduler
    from exporter.server.webconfig import load_web_config

    parts = assemble(config, participate=True, recorder=recorder)
    exporter = Exporter(config, parts, config_file=config_file)
    server = build_server(config.exposition.listen, exporter.state,
                          web or load_web_config(config.exposition), limits,
                          metrics_path).start()
    scheduler = Scheduler(config.check_interval,
                          archivemake.after_first(exporter.cycle, config.spark.master),
                          exporter.skipped)
    def stopping(*_: object) -> None:
        scheduler.stop()
        # off the signal handler: cancelling talks to the JVM over py4j
        threading.Thread(target=exporter.cancel, daemon=True).start()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stopping)
        if config_file is not None:
            signal.signal(signal.SIGHUP, lambda *_: config_file.request())
    if stop is not None:
        def stop_when_set() -> None:
            stop.wait()
            stopping()

        threading.Thread(target=stop_when_set, daemon=True).start()
    exchange_stop = threading.Event()
    exchange = _exchange_rounds(exporter, exchange_stop)
    log.info("serving on %s", server.url)
    ready(server.url)
    try:
        if not scheduler.stopping:
            # Spark's start (seconds) is no check: keep it out of the first check's
            # duration, so a restart does not look like a slow check to the alert rules.
            from exporter.pipeline.spark.session import SparkStartError, get_context

            try:
                get_context(config.spark)
            except SparkStartError as exc:  # one line, not PySpark's traceback
                log.error("%s", exc)
                return 1
        scheduler.run()
    finally:
        exchange_stop.set()
        exchange.join(timeout=10)
        server.shutdown()
        exporter.close()
        from exporter.pipeline.spark.session import stop as stop_spark

        stop_spark()
    log.info("stopped cleanly")
    return 0

