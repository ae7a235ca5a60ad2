"""`--log.format`: logfmt (Prometheus' default) and JSON, one line per record."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest

from exporter import logs
from exporter.cli import _parser


@pytest.fixture
def captured():
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    yield stream
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in saved[0]:
        root.addHandler(h)
    root.setLevel(saved[1])


def _emit(log: logging.Logger) -> None:
    log.debug("hidden at info")
    log.info("plain")
    log.warning('quoted "value" = %s', "a b")
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        log.exception("failed")


def test_logfmt_is_one_parseable_line_per_record(captured):
    logs.setup("info", "logfmt", captured)
    _emit(logging.getLogger("exporter.test"))
    lines = captured.getvalue().splitlines()
    assert len(lines) == 3  # debug filtered, the traceback kept on its line
    pair = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')
    parsed = [{k: json.loads(v) if v.startswith('"') else v for k, v in pair.findall(line)}
              for line in lines]
    assert [p["level"] for p in parsed] == ["info", "warn", "error"]
    assert parsed[0] == {"time": parsed[0]["time"], "level": "info",
                         "logger": "exporter.test", "msg": "plain"}
    assert lines[0].endswith(" msg=plain")  # bare when it can be
    assert parsed[1]["msg"] == 'quoted "value" = a b'
    assert parsed[2]["msg"] == "failed"
    assert "Traceback" in parsed[2]["err"] and "boom\nsecond line" in parsed[2]["err"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", parsed[0]["time"])


def test_json_is_one_object_per_line_with_the_same_fields(captured):
    logs.setup("debug", "json", captured)
    _emit(logging.getLogger("exporter.test"))
    records = [json.loads(line) for line in captured.getvalue().splitlines()]
    assert [r["level"] for r in records] == ["debug", "info", "warn", "error"]
    assert all(set(r) == {"time", "level", "logger", "msg"} for r in records[:3])
    assert "ValueError: boom" in records[3]["err"]


@pytest.mark.parametrize(("value", "written"), [
    ("plain", "plain"), ("", '""'), ("a b", '"a b"'), ("k=v", '"k=v"'),
    ('say "hi"', '"say \\"hi\\""'), ("tab\there", '"tab\\there"'),
    ("back\\slash", '"back\\\\slash"'),
])
def test_logfmt_values_are_quoted_only_when_they_must_be(value, written):
    assert logs.logfmt_value(value) == written


def test_warn_and_warning_are_one_level_and_py4j_is_quiet_unless_debugging(captured):
    logs.setup("warn", "logfmt", captured)
    assert logging.getLogger().level == logging.WARNING
    assert logging.getLogger("py4j").level == logging.WARNING
    logs.setup("debug", "logfmt", captured)
    assert logging.getLogger("py4j").level == logging.DEBUG
    with pytest.raises(ValueError, match="logfmt, json"):
        logs.setup("info", "xml", captured)


def test_what_py4j_logs_on_the_root_logger_is_held_to_py4j_s_level(captured):
    """py4j's java_gateway.py logs its retry to a JVM that has gone with the root logger's
    `logging.info`, a traceback attached: at every stop where the JVM died first."""
    import py4j.java_gateway

    def record(level: int, pathname: str) -> logging.LogRecord:
        return logging.LogRecord("root", level, pathname, 1056,
                                 "Exception while sending command.", (), None)

    logs.setup("info", "logfmt", captured)
    root = logging.getLogger()
    root.handle(record(logging.INFO, py4j.java_gateway.__file__))
    assert captured.getvalue() == ""
    root.handle(record(logging.INFO, __file__))  # anyone else's root record: kept
    root.handle(record(logging.ERROR, py4j.java_gateway.__file__))  # py4j's errors: kept
    assert captured.getvalue().count("msg=\"Exception while sending command.\"") == 2
    logs.setup("debug", "logfmt", captured)
    root.handle(record(logging.INFO, py4j.java_gateway.__file__))
    assert captured.getvalue().count("level=info logger=root") == 2


def test_the_run_command_takes_the_prometheus_flags():
    args = _parser().parse_args(["run", "--config.file", "x.yaml", "--log.format", "json",
                                 "--log.level", "warn"])
    assert (args.log_format, args.log_level) == ("json", "warn")
    assert _parser().parse_args(["run", "--config.file", "x.yaml"]).log_format == "logfmt"
    with pytest.raises(SystemExit):
        _parser().parse_args(["run", "--config.file", "x.yaml", "--log.format", "text"])


@pytest.mark.parametrize(("argv", "default"), [
    (["validate-config", "c.yaml"], "warn"),
    (["run", "--config.file", "c.yaml"], "info"),
    (["replay", "--config.file", "c.yaml", "--record.dir", "r", "--out", "o"], "warn"),
    (["check", "--config.file", "c.yaml"], "warn"),
    (["demo"], "warn"),
    (["generate"], "warn"),
])
def test_every_command_takes_the_logging_flags(argv: list[str], default: str):
    assert _parser().parse_args(argv).log_level == default
    args = _parser().parse_args([*argv, "--log.level", "debug", "--log.format", "json"])
    assert (args.log_level, args.log_format) == ("debug", "json")


def test_a_one_shot_command_logs_in_the_format_asked(tmp_path):
    """`validate-config --log.level debug --log.format json`: its log lines are JSON objects
    on stderr (the command itself prints OK on stdout)."""
    import subprocess
    import sys

    config = tmp_path / "c.yaml"
    config.write_text("cluster: c\nsources:\n  brokers:\n    - url: http://127.0.0.1:1/metrics\n")
    done = subprocess.run([sys.executable, "-m", "exporter", "validate-config", str(config),
                           "--log.level", "debug", "--log.format", "json"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout == "OK\n", done.stderr
    for line in done.stderr.splitlines():
        assert json.loads(line)["level"] in ("debug", "info", "warn", "error")
