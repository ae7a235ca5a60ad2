"""Command line: wires config, stages and server together; holds no logic of its own."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from exporter import importblocker, logs


def _add_config(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--config.file", "--config", dest="config", required=required,
                   metavar="FILE", help="YAML configuration file")
    _add_expand(p)


def _add_expand(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config.expand-env", dest="expand_env", action="store_true",
                   help="replace ${VAR} and ${VAR:-default} in the file from the environment")


def _add_logging(p: argparse.ArgumentParser, level: str = "warn") -> None:
    """Every command logs alike, to stderr: `run` at info by default, the one-shot commands
    and the demo (whose output is on stdout) at warn."""
    p.add_argument("--log.level", dest="log_level", default=level, choices=logs.LEVELS,
                   help=f"the least severe level logged (default: {level})")
    p.add_argument("--log.format", dest="log_format", default="logfmt", choices=logs.FORMATS,
                   help="log line format (default: logfmt)")


def _add_web_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--web.config.file", dest="web_config", metavar="FILE",
                   help="Prometheus exporter-toolkit web config (TLS, client certificates, "
                   "basic auth, headers, rate limit); re-read when it changes")


class _Version(argparse.Action):
    """`--version`: worked out only when asked (it asks git and reads the JDK's release)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from exporter.pipeline.buildinfo import build_info

        print(build_info().lines())
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pulsar-quota-exporter", description=__doc__)
    p.add_argument("--version", action=_Version, nargs=0,
                   help="the version, revision and runtimes, then exit")
    sub = p.add_subparsers(dest="command", required=True)

    v = sub.add_parser("validate-config", help="validate a config file; exit 2 on errors")
    v.add_argument("file", metavar="FILE")
    _add_expand(v)
    _add_web_config(v)

    r = sub.add_parser("run", help="run the exporter: check every interval, serve /metrics")
    _add_config(r)
    r.add_argument("--web.listen-address", dest="listen", metavar="HOST:PORT",
                   help="override exposition.listen")
    _add_web_config(r)
    r.add_argument("--web.max-requests", dest="max_requests", type=int, default=40,
                   metavar="N", help="requests served at once, 503 beyond; 0: no limit "
                   "(default 40; health probes are not counted)")
    r.add_argument("--web.telemetry-path", dest="telemetry_path", default="/metrics",
                   metavar="PATH", help="the path of the metrics (default /metrics)")
    r.add_argument("--record.dir", dest="record_dir", metavar="DIR",
                   help="record what each cycle saw here, for `replay`")
    r.add_argument("--record.retention.time", dest="record_time", default="7d",
                   metavar="DURATION", help="drop recorded cycles older than this (default 7d)")
    r.add_argument("--record.retention.size", dest="record_size", default="1GiB",
                   metavar="SIZE", help="keep at most this much, oldest dropped (default 1GiB)")

    w = sub.add_parser("replay", help="replay recorded cycles under a what-if config")
    _add_config(w)
    w.add_argument("--record.dir", dest="record_dir", required=True, metavar="DIR")
    w.add_argument("--out", required=True, metavar="DIR",
                   help="where report.json, the plots and report.html go")
    w.add_argument("--from", dest="start", metavar="TIME", help="unix seconds or ISO 8601")
    w.add_argument("--to", dest="end", metavar="TIME")

    c = sub.add_parser("check", help="run one check cycle and print the decisions")
    _add_config(c)
    c.add_argument("--once", action="store_true", help="one cycle (the only mode for now)")
    c.add_argument("--format", choices=("table", "json"), default="table")

    d = sub.add_parser("demo",
                       help="embedded broker + workload + exporter (exporter/data/demo.yaml)")
    d.add_argument("--duration", type=float, metavar="SECONDS",
                   help="stop after this long (default: until Ctrl-C)")

    g = sub.add_parser("generate", help="regenerate the committed artefacts from the catalogue")
    g.add_argument("--check", action="store_true",
                   help="change nothing; exit 1 if any generated file is out of date")
    g.add_argument("--selector", metavar="MATCHERS",
                   help='label matchers added to every alert and dashboard query, e.g. '
                   'job="pulsar-exporter",env="prod" (needs --out)')
    g.add_argument("--out", metavar="DIR",
                   help="write only the rules and dashboards, under DIR/alerts and "
                   "DIR/dashboards, leaving the committed files alone")
    for command, parser in sub.choices.items():
        _add_logging(parser, "info" if command == "run" else "warn")
    return p


def _load_or_exit(path: str, expand: bool = False):
    from exporter.config.load import ConfigError, load

    try:
        return load(path, expand=expand)
    except ConfigError as e:
        for line in e.errors:
            print(line, file=sys.stderr)
        raise SystemExit(2) from None


def _web_or_exit(path: str | None, config_file: str, config):
    """The --web.config.file's source, None without one; its errors exit 2, as a config's."""
    if path is None:
        return None
    from exporter.server.toolkit import WebConfigFile, conflicts
    from exporter.server.webconfig import WebConfigError

    errors = conflicts(path, config_file, config.exposition)
    try:
        web = WebConfigFile(path)
    except WebConfigError as e:
        errors += e.errors
    for line in errors:
        print(line, file=sys.stderr)
    if errors:
        raise SystemExit(2)
    return web


def main(argv: Sequence[str] | None = None) -> int:
    importblocker.refuse()
    args = _parser().parse_args(argv)
    logs.setup(args.log_level, args.log_format)
    _terminate_like_interrupt()
    if args.command == "validate-config":
        _web_or_exit(args.web_config, args.file, _load_or_exit(args.file, args.expand_env))
        print("OK")
        return 0
    if args.command == "run":
        import dataclasses

        from exporter.config.reload import ConfigFile
        from exporter.pipeline.spark.session import start_in_background

        def adjust(config):
            if not args.listen:
                return config
            return dataclasses.replace(
                config, exposition=dataclasses.replace(config.exposition, listen=args.listen))

        config = adjust(_load_or_exit(args.config, args.expand_env))
        web = _web_or_exit(args.web_config, args.config, config)
        recorder = _recorder(args)  # a bad flag exits 2 before anything starts
        limits = _limits(args)
        from exporter.server.http import ListenError, check_listen

        try:
            check_listen(config.exposition.listen)
            start_in_background(config.spark)  # beside the imports below
            from exporter.runtime.serve import run

            return run(config, config_file=ConfigFile(args.config, config, adjust,
                                                      expand=args.expand_env), recorder=recorder,
                       limits=limits, metrics_path=args.telemetry_path, web=web)
        except ListenError as exc:  # a port in use: the environment's, not the config's
            logging.getLogger("exporter.cli").error("%s", exc)
            return 1
    if args.command == "check":
        return _check(args)
    if args.command == "replay":
        return _replay(args)
    if args.command == "demo":
        from exporter.demo.run import run_demo

        return run_demo(args.duration)
    if args.command == "generate":
        from exporter.generate.all import generate

        return generate(check=args.check, selector=args.selector, out=args.out)
    raise AssertionError(f"unhandled command {args.command}")


def _terminate_like_interrupt() -> None:
    """SIGTERM (a service manager's, `timeout`'s) unwinds like Ctrl-C: every command's
    `finally` runs, so the demo stops its embedded broker (its own process group, which a
    signal to ours never reaches) and Spark stops. `run` installs its own handlers: it
    finishes the running cycle first."""
    import signal
    import threading

    def terminated(*_: object) -> None:
        raise SystemExit(128 + signal.SIGTERM)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, terminated)


def _check(args: argparse.Namespace) -> int:
    import json

    from exporter.demo.run import summary
    from exporter.pipeline.spark.session import stop
    from exporter.runtime.cycle import Exporter

    config = _load_or_exit(args.config, args.expand_env)
    exporter = Exporter(config)
    try:
        report = exporter.cycle()
    finally:
        exporter.close()
        stop()
    if args.format == "json":
        print(json.dumps(report.status, indent=2, sort_keys=False))
    else:
        print(summary(report))
    down = [s for s in report.status["sources"] if not s["up"]]
    return 1 if down or report.decisions is None else 0


def _flag_error(flag: str, message: str) -> SystemExit:
    print(f"pulsar-quota-exporter: {flag}: {message}", file=sys.stderr)
    return SystemExit(2)


def _limits(args: argparse.Namespace):
    from exporter.server.http import check_metrics_path
    from exporter.server.limits import Limits

    if args.max_requests < 0:
        raise _flag_error("--web.max-requests", f"{args.max_requests}: expected 0 or more")
    try:
        check_metrics_path(args.telemetry_path)
    except ValueError as e:
        raise _flag_error("--web.telemetry-path", str(e)) from None
    return Limits(max_requests=args.max_requests)


def _recorder(args: argparse.Namespace):
    if not args.record_dir:
        return None
    from exporter.config.units import parse_duration, parse_size
    from exporter.record.store import Recorder

    try:
        max_age = parse_duration(args.record_time)
    except ValueError as e:
        raise _flag_error("--record.retention.time", str(e)) from None
    try:
        max_bytes = parse_size(args.record_size)
    except ValueError as e:
        raise _flag_error("--record.retention.size", str(e)) from None
    try:
        return Recorder(args.record_dir, max_age=max_age, max_bytes=max_bytes)
    except OSError as e:
        raise _flag_error("--record.dir", f"{args.record_dir}: {e.strerror or e}") from None


def _replay(args: argparse.Namespace) -> int:
    from exporter.pipeline.spark.session import stop
    from exporter.record.command import parse_time, replay

    config = _load_or_exit(args.config, args.expand_env)
    bounds = []
    for flag, value in (("--from", args.start), ("--to", args.end)):
        try:
            bounds.append(None if value is None else parse_time(value))
        except ValueError as e:
            raise _flag_error(flag, str(e)) from None
    try:
        return replay(config, args.record_dir, args.out, *bounds)
    finally:
        stop()
