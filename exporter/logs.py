"""Log lines in the Prometheus exporters' formats (`--log.format`, `--log.level`).

logfmt is the default, as in Prometheus' own promslog: `time=… level=… logger=… msg=…`,
one line per record, values quoted only when they must be, a traceback carried in `err`
on the same line (a multi-line traceback would be torn apart by line-based collectors).
`json` writes the same fields as one JSON object per line. Levels are promslog's: debug,
info, warn, error (`warning` is accepted for `warn`).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import TextIO

FORMATS = ("logfmt", "json")
LEVELS = ("debug", "info", "warn", "warning", "error")
_LEVEL_NAMES = {"WARNING": "warn", "CRITICAL": "error"}


def _fields(formatter: logging.Formatter, record: logging.LogRecord) -> dict[str, str]:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    fields = {
        "time": f"{stamp}.{int(record.msecs):03d}Z",
        "level": _LEVEL_NAMES.get(record.levelname, record.levelname.lower()),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    if record.exc_info:
        fields["err"] = formatter.formatException(record.exc_info)
    return fields


def logfmt_value(value: str) -> str:
    """A value as go-logfmt writes it: bare when it has no space, quote, `=` or control
    character, else double-quoted with `\\`, `"`, newlines and tabs escaped."""
    if value and not any(c in value for c in ' "=\\') and value.isprintable():
        return value
    return json.dumps(value, ensure_ascii=False)


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={logfmt_value(v)}" for k, v in _fields(self, record).items())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(self, record), ensure_ascii=False)


def setup(level: str = "info", fmt: str = "logfmt", stream: TextIO | None = None) -> None:
    """Route every logger through one stderr handler in `fmt` at `level`."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel("WARNING" if level in ("warn", "warning") else level.upper())
    # py4j (PySpark's bridge to the JVM) logs each connection it opens and closes at info
    logging.getLogger("py4j").setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
    handler.addFilter(_py4j_on_root)


def _py4j_on_root(record: logging.LogRecord) -> bool:
    """py4j logs some records on the root logger (`logging.info("Exception while sending
    command.", exc_info=True)` in java_gateway.py, on every retry to a JVM that has gone):
    they are held to the py4j logger's level, as its others are."""
    if record.name == "root" and "py4j" in Path(record.pathname).parts:
        return record.levelno >= logging.getLogger("py4j").getEffectiveLevel()
    return True
