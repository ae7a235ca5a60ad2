"""Command line: wires config, stages and server together; holds no logic of its own."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from exporter import __version__, logs


def _add_config(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--config.file", "--config", dest="config", required=required,
                   metavar="FILE", help="YAML configuration file")
    _add_expand(p)


def _add_expand(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config.expand-env", dest="expand_env", action="store_true",
                   help="replace ${VAR} and ${VAR:-default} in the file from the environment")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pulsar-quota-exporter", description=__doc__)
    p.add_argument("--version", action="version", version=__version__)
    sub = p.add_subparsers(dest="command", required=True)

    v = sub.add_parser("validate-config", help="validate a config file; exit 2 on errors")
    v.add_argument("file", metavar="FILE")
    _add_expand(v)

    r = sub.add_parser("run", help="run the exporter: check every interval, serve /metrics")
    _add_config(r)
    r.add_argument("--web.listen-address", dest="listen", metavar="HOST:PORT",
                   help="override exposition.listen")
    r.add_argument("--log.level", dest="log_level", default="info",
                   choices=logs.LEVELS)
    r.add_argument("--log.format", dest="log_format", default="logfmt", choices=logs.FORMATS,
                   help="log line format (default: logfmt)")

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
    return p


def _load_or_exit(path: str, expand: bool = False):
    from exporter.config.load import ConfigError, load

    try:
        return load(path, expand=expand)
    except ConfigError as e:
        for line in e.errors:
            print(line, file=sys.stderr)
        raise SystemExit(2) from None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "validate-config":
        _load_or_exit(args.file, args.expand_env)
        print("OK")
        return 0
    if args.command == "run":
        import dataclasses

        from exporter.config.reload import ConfigFile
        from exporter.runtime.cycle import run

        def adjust(config):
            if not args.listen:
                return config
            return dataclasses.replace(
                config, exposition=dataclasses.replace(config.exposition, listen=args.listen))

        config = adjust(_load_or_exit(args.config, args.expand_env))
        logs.setup(args.log_level, args.log_format)
        return run(config, config_file=ConfigFile(args.config, config, adjust,
                                                  expand=args.expand_env))
    if args.command == "check":
        return _check(args)
    if args.command == "demo":
        from exporter.demo.run import run_demo

        return run_demo(args.duration)
    if args.command == "generate":
        from exporter.generate.all import generate

        return generate(check=args.check, selector=args.selector, out=args.out)
    raise AssertionError(f"unhandled command {args.command}")


def _check(args: argparse.Namespace) -> int:
    import json

    from exporter.demo.run import summary
    from exporter.pipeline.session import stop
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
