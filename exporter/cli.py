"""Command line: wires config, stages and server together; holds no logic of its own."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from exporter import __version__


def _add_config(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--config.file", "--config", dest="config", required=required,
                   metavar="FILE", help="YAML configuration file")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pulsar-quota-exporter", description=__doc__)
    p.add_argument("--version", action="version", version=__version__)
    sub = p.add_subparsers(dest="command", required=True)

    v = sub.add_parser("validate-config", help="validate a config file; exit 2 on errors")
    v.add_argument("file", metavar="FILE")

    g = sub.add_parser("generate", help="regenerate the committed artefacts from the catalogue")
    g.add_argument("--check", action="store_true",
                   help="change nothing; exit 1 if any generated file is out of date")
    return p


def _load_or_exit(path: str):
    from exporter.config import ConfigError, load

    try:
        return load(path)
    except ConfigError as e:
        for line in e.errors:
            print(line, file=sys.stderr)
        raise SystemExit(2) from None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "validate-config":
        _load_or_exit(args.file)
        print("OK")
        return 0
    if args.command == "generate":
        from exporter.generate.all import generate

        return generate(check=args.check)
    raise AssertionError(f"unhandled command {args.command}")
