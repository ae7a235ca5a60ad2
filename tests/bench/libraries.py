"""Benchmark: two well-kept libraries against what the exporter does by hand (issue 24, part
5; the decision and its reasons are in docs/design-decisions.md). Prints Markdown tables;
not a test.

    .venv/bin/python -m tests.bench.libraries [--venv PATH [--record]]

1. The usage report: exporter/transport/codec.py + decoder.py (hand-written LEB128, strict)
   against Google's `protobuf` runtime (tests/bench/rivals/usage_report.proto, compiled by
   grpcio-tools' protoc at run time; tests/bench/rivals/protobuf_codec.py). Reports as a
   broker sends them: `tenant-NNNNN-rg` names drawn from 100,000, all three monitoring
   classes, rates log-uniform, limits 1–3 × usage or none; 1, 100 and 10,000 groups. Per
   report: bytes; encode from and decode to `WireReport` (best of 3 after a warm-up, calls
   batched to 50 ms, one core); which of 20 payloads codec's decoder refuses protobuf
   refuses as it is and with the checks re-added by hand (re-serialize and compare, then
   the semantic checks); every cut-off copy of a report and of a goodbye.
2. The config: exporter/config/ against pydantic v2 (tests/bench/rivals/pydantic_config.py)
   on a slice: cluster, check_interval, sources (url, timeout, admin, service_url),
   backlog_quotas, resource_groups. Today's error lines for every case of
   tests/unit/test_config.py inside the slice, compared whole (the tests check a prefix and
   a gist); validation time of examples/reference.yaml's slice and of 10,000 groups.
Both: lines (code lines: no blank, comment or docstring lines; and as `wc -l`), import time
in a fresh interpreter (best of 5), what the dependency installs.

The rivals need packages the project does not depend on, and this bench installs nothing:
`--venv PATH` runs them (and ours beside them, in the same process: the machine is shared)
with a venv that has them: `python3 -m venv PATH && PATH/bin/pip install protobuf
grpcio-tools pydantic`. `--record` keeps that run in tests/bench/rivals/recorded.json;
without `--venv` the rivals' columns come from there, dated and labelled RECORDED, and
ours are measured now as well.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import math
import random
import subprocess
import sys
import tempfile
import time
import tokenize
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from exporter.config.settings import MonitoringClass
from exporter.transport.codec import Entry, Rates, WireReport

ROOT = Path(__file__).resolve().parents[2]
RIVALS = Path(__file__).with_name("rivals")
FILE = "t.yaml"
WIRE_CASES = [(1, True), (1, False), (100, True), (100, False), (10_000, True),
              (10_000, False)]
CLASSES = tuple(MonitoringClass)
SLICE = ("cluster", "check_interval", "sources", "backlog_quotas", "resource_groups")
OURS_WIRE = [ROOT / "exporter/transport/codec.py", ROOT / "exporter/transport/decoder.py"]
# What pydantic would replace (the walk, every section's keys, cross-key checks) and what
# stays either way (single values, units, YAML loading, credentials; the prototype reuses
# values.py and units.py).
OURS_REPLACED = [ROOT / "exporter/config" / f for f in ("reader.py", "sections.py")]
OURS_KEPT = [ROOT / "exporter/config" / f for f in ("values.py", "units.py", "load.py",
                                                    "auth.py")]
# Imported before the clock starts: what either side needs (the report's and the config's
# dataclasses; the converters the pydantic prototype reuses).
WIRE_BASE = "exporter.config.settings"
CONFIG_BASE = "exporter.config.settings, exporter.config.values"
WORKER = "--- bench only"  # the rivals' files are counted up to their bench-only part


# --- shared by the rivals' workers (light imports only: they run in another venv) ----------


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def wire_report(groups: int, *, limits: bool, seed: int = 42) -> WireReport:
    rng = random.Random(seed)
    names = sorted(f"tenant-{n:05d}-rg" for n in rng.sample(range(100_000), groups))
    entries = []
    for name in names:
        for cls in CLASSES:
            messages = _log_uniform(rng, 1, 10_000)
            usage = Rates(messages, messages * _log_uniform(rng, 100, 10_240))
            factor = rng.uniform(1.0, 3.0)
            limit = Rates(usage.messages * factor, usage.bytes * factor) if limits else None
            entries.append(Entry(name, cls, usage, limit))
    return WireReport("pulsar-broker-042.pulsar-broker.pulsar.svc.cluster",
                      1_764_000_000_000, 1_764_000_000.123, tuple(entries))


def best(fn: Callable[[], object], repeat: int = 3, budget: float = 0.05) -> float:
    """Seconds per call: calls batched to at least `budget` seconds, best of `repeat`."""
    number, started = 1, time.perf_counter()
    fn()
    once = time.perf_counter() - started
    if once < budget:
        number = max(1, int(budget / max(once, 1e-7)))
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - started) / number)
    return min(runs)


def installed_bytes(dists: list[str]) -> int:
    """What pip put on disk for these distributions (their RECORD), this interpreter's."""
    total = 0
    for name in dists:
        for file in metadata.distribution(name).files or ():
            total += file.size or 0
    return total


def _code_lines(text: str) -> int:
    """Lines holding code: no blank, comment-only or docstring lines."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            docstrings |= set(range(body[0].lineno, (body[0].end_lineno or 0) + 1))
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER)
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type not in skip:
            lines |= set(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def count_lines(paths: list[Path], stop: str | None = None,
                only: tuple[str, ...] = ()) -> dict[str, int]:
    """`code`: lines holding code; `total`: as `wc -l`. A file is read up to the line
    holding `stop` (the rivals' bench-only part); `only`: just these top-level functions."""
    code = total = 0
    for path in paths:
        text = path.read_text()
        if stop and stop in text:
            text = text[:text.rindex("\n", 0, text.index(stop)) + 1]
        if only:
            text = "\n".join(ast.get_source_segment(text, node) or ""
                             for node in ast.parse(text).body
                             if isinstance(node, ast.FunctionDef) and node.name in only) + "\n"
        total += text.count("\n")
        if path.suffix == ".py":
            code += _code_lines(text)
        else:
            code += sum(1 for line in text.splitlines()
                        if line.strip() and not line.strip().startswith("//"))
    return {"code": code, "total": total}


def import_seconds(module: str, after: str = "", path: str = "") -> float:
    """What importing `module` adds, in a fresh interpreter that has imported `after` (what
    either side needs) and has `path` first on sys.path; best of 5."""
    code = (f"import sys, time; sys.path.insert(0, {path!r}); {after and f'import {after}; '}"
            f"t = time.perf_counter(); import {module}; print(time.perf_counter() - t)")
    return min(float(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                    text=True, check=True, cwd=ROOT).stdout)
               for _ in range(5))


# --- our side, measured here ---------------------------------------------------------------


def ours_wire() -> dict[str, Any]:
    from exporter.transport.codec import encode
    from exporter.transport.decoder import decode

    sizes, timings = {}, {}
    for groups, limits in WIRE_CASES:
        report = wire_report(groups, limits=limits)
        payload = encode(report)
        key = f"{groups}/{int(limits)}"
        sizes[key] = len(payload)
        timings[key] = {"encode": best(lambda r=report: encode(r)),
                        "decode": best(lambda p=payload: decode(p))}

    def prefixes(report: WireReport) -> dict[str, int]:
        payload = encode(report)
        return {"accepted": sum(isinstance(decode(payload[:end]), WireReport)
                                for end in range(len(payload))), "count": len(payload)}

    small = wire_report(3, limits=True)
    goodbye = WireReport(small.participant, small.sequence, small.sent_at, (), goodbye=True)
    return {"sizes": sizes, "timings": timings, "prefixes": prefixes(small),
            "goodbye_prefixes": prefixes(goodbye),
            "replaced_lines": _add(count_lines(OURS_WIRE[1:]), count_lines(
                OURS_WIRE[:1], only=("_varint", "_shared_prefix", "version_of", "encode"))),
            "import_seconds": import_seconds("exporter.transport", after=WIRE_BASE),
            "lines": count_lines(OURS_WIRE)}


def _slice_of(data: dict[str, Any]) -> dict[str, Any]:
    """The keys the pydantic slice covers (no credentials, TLS or policy source)."""
    data = {k: v for k, v in data.items() if k in SLICE}
    sources = dict(data.get("sources") or {})
    for key in ("service_token_file", "service_tls_config"):
        sources.pop(key, None)
    sources["brokers"] = [{k: v for k, v in b.items() if k in ("url", "timeout")}
                          for b in sources.get("brokers", [])]
    quotas = {k: v for k, v in (data.get("backlog_quotas") or {}).items() if k != "source"}
    return {**data, "sources": sources, "backlog_quotas": quotas}


def config_bodies() -> dict[str, dict[str, Any]]:
    import yaml

    reference = _slice_of(yaml.safe_load((ROOT / "examples/reference.yaml").read_text()))
    groups = {
        f"rg-{i:05d}": {
            "publish": {"messages_per_second": 1000 + i, "bytes_per_second": "10MiB"},
            "dispatch": {"messages_per_second": -1, "bytes_per_second": f"{i + 1}KiB/s"},
            "tenants": [f"tenant-{i:05d}"],
            "namespaces": [f"shared/ns-{i:05d}"],
        }
        for i in range(10_000)
    }
    big = {"cluster": "c", "sources": {"brokers": [{"url": "http://b:8080/metrics"}]},
           "resource_groups": groups}
    return {"reference.yaml (slice)": reference, "10,000 groups": big}


def ours_slice(data: dict[str, Any], filename: str) -> object:
    """Today's validation of the slice: the Reader and the section readers parse uses."""
    from exporter.config import sections
    from exporter.config import values as cv
    from exporter.config.reader import Reader

    r = Reader(filename)
    top = r.mapping(data, "", SLICE)
    if "cluster" not in top:
        r.error("cluster", "required: the cluster name, put as a label on every series")
    parts = (r.get(top, "cluster", "", cv.string, ""),
             r.get(top, "check_interval", "", cv.duration, 60.0),
             sections.sources(r, top.get("sources"), "sources"),
             sections.backlog_quotas(r, top.get("backlog_quotas"), "backlog_quotas"),
             sections.resource_groups(r, top.get("resource_groups"), "resource_groups"))
    return r.errors or parts


def config_cases() -> list[dict[str, Any]]:
    """Every error case of tests/unit/test_config.py inside the slice, with today's lines."""
    from exporter.config.load import ConfigError, parse
    from tests.unit.test_config import CASES, merged, minimal

    def today(data: object) -> list[str]:
        try:
            parse(data, FILE)
        except ConfigError as exc:
            return exc.errors
        return []

    def root(path: str) -> str:
        return path.replace("[", ".").split(".")[0]

    cases = [{"name": f"{path}: {gist}", "data": merged(minimal(), patch)}
             for patch, path, gist in CASES if root(path) in (*SLICE, "check_intervall")]
    no_cluster = minimal()
    del no_cluster["cluster"]
    cases += [
        {"name": "test_missing_cluster_is_required", "data": no_cluster},
        {"name": "test_a_group_name_is_named_alongside_…", "data": merged(minimal(), {
            "resource_groups": {"gold": {"tenants": ["t"]}, "silver": {"tenants": ["t"]}}})},
        {"name": "test_a_namespace_bound_to_two_groups_names_both", "data": merged(minimal(), {
            "resource_groups": {"a": {"namespaces": ["t/n"]},
                                "b": {"namespaces": ["x/y", "t/n"]}}})},
        {"name": "test_every_error_in_a_file_is_reported_in_one_go (slice)", "data": merged(
            minimal(), {"check_interval": "0s", "bogus": 1,
                        "backlog_quotas": {"default": {"limit_sise": 1, "policy": "drop"}}})},
        {"name": "test_cli_validate_config_… (slice)", "data": merged(minimal(), {
            "backlog_quotas": {"default": {"limit_sise": "1GiB"}}})},
        {"name": "test_unknown_top_level_keys_… (a sample)",
         "data": {**minimal(), "spurce": 1}},
    ]
    cases += [{"name": f"test_top_level_must_be_a_mapping[{found}]", "data": data}
              for data, found in ((None, "empty"), ([1, 2], "list"), ("cluster: x", "str"))]
    cases += [  # not in the tests: what the tests do not pin
        {"name": "(added) a field error beside a cross-entry one", "extra": True,
         "data": merged(minimal(), {"check_interval": "0s", "resource_groups": {
             "a": {"tenants": ["t"]}, "b": {"tenants": ["t"]}}})},
        {"name": "(added) a broker listed twice", "extra": True, "data": merged(minimal(), {
            "sources": {"brokers": [{"url": "http://b/m"}, {"url": "http://b/m"}]}})},
    ]
    for case in cases:
        case["expected"] = today(case["data"])
    return cases


def _facts(value: object) -> object:
    """A validated config (dataclasses or a pydantic dump) as plain JSON values."""
    from dataclasses import fields, is_dataclass
    from enum import Enum

    if is_dataclass(value):
        return {f.name: _facts(getattr(value, f.name)) for f in fields(value)
                if f.name not in ("name", "authorization", "tls", "source",
                                  "service_token_file", "service_tls")}
    if isinstance(value, dict) or hasattr(value, "keys"):
        return {k: _facts(v) for k, v in value.items()}  # type: ignore[attr-defined]
    if isinstance(value, list | tuple):
        return [_facts(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    return value


def ours_config(bodies: dict[str, dict[str, Any]]) -> dict[str, Any]:
    timings = {name: best(lambda d=data: ours_slice(d, FILE)) for name, data in bodies.items()}
    return {"timings": timings,
            "import_seconds": import_seconds("exporter.config.sections", after=CONFIG_BASE),
            "lines": count_lines(OURS_REPLACED), "kept_lines": count_lines(OURS_KEPT),
            "slice_lines": _add(count_lines(OURS_REPLACED[:1]), count_lines(
                OURS_REPLACED[1:], only=("sources", "_namespaces", "backlog_quotas", "_quota",
                                         "resource_groups", "_rate_limit")))}


def _add(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {key: a[key] + b[key] for key in a}


def expected_facts(bodies: dict[str, dict[str, Any]]) -> dict[str, object]:
    out = {}
    for name, data in bodies.items():
        parts = ours_slice(data, FILE)
        assert isinstance(parts, tuple), parts
        cluster, interval, sources, quotas, groups = parts
        out[name] = _facts({"cluster": cluster, "check_interval": interval,
                            "sources": sources, "backlog_quotas": quotas,
                            "resource_groups": groups})
    return out


# --- the rivals, run in another venv -------------------------------------------------------


def _worker(python: str, module: str, *args: str) -> dict[str, Any]:
    done = subprocess.run([python, "-m", module, *args], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    if done.returncode:
        raise SystemExit(f"{module} failed under {python}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def rivals(venv: str, bodies: dict[str, dict[str, Any]]) -> dict[str, Any]:
    python = str(Path(venv) / "bin" / "python")
    with tempfile.NamedTemporaryFile("w", suffix=".json") as spec:
        json.dump({"cases": config_cases(), "bodies": bodies,
                   "facts": expected_facts(bodies)}, spec)
        spec.flush()
        return {"protobuf": _worker(python, "tests.bench.rivals.protobuf_codec"),
                "pydantic": _worker(python, "tests.bench.rivals.pydantic_config", spec.name)}


# The rivals' workers' output of one `--venv --record` run, shown when no --venv is given.
RECORDED = RIVALS / "recorded.json"


# --- tables --------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return (f"{seconds * 1000:,.3f}" if seconds < 0.001 else f"{seconds * 1000:,.2f}"
            if seconds < 0.1 else f"{seconds * 1000:,.0f}")


def _size(size: int) -> str:
    return f"{size / 1024:,.0f} KiB" if size >= 10 * 1024 else f"{size:,} B"


def _case(key: str) -> str:
    groups, limits = key.split("/")
    return f"{int(groups):,} | {'yes' if limits == '1' else 'no'}"


def wire_tables(ours: dict[str, Any], pb: dict[str, Any] | None, recorded: bool) -> None:
    print("\n### Usage report: bytes per report (3 classes per group)\n")
    print("| groups | limits | ours | protobuf | protobuf, names front-coded by hand |")
    print("|---:|:---:|---:|---:|---:|")
    for key, size in ours["sizes"].items():
        other = pb["sizes"][key] if pb else None
        cells = (f"{_size(other['plain'])} ({other['plain'] / size:.2f}×) | "
                 f"{_size(other['front_coded'])} ({other['front_coded'] / size:.2f}×)"
                 if other else "– | –")
        print(f"| {_case(key)} | {_size(size)} | {cells} |")
    print("\n### Usage report: ms per report, encode from and decode to `WireReport`\n")
    if pb:
        print("Both sides timed in one process, one after the other (the machine is shared)"
              + (", recorded; ours as measured now in the last column." if recorded else "."))
        now = " | ours now, enc / dec" if recorded else ""
        print(f"\n| groups | limits | ours encode | protobuf encode | ours decode | protobuf "
              f"decode as it is | protobuf decode + checks | of which protobuf's parse{now} |")
        print("|---:|:---:|---:|---:|---:|---:|---:|---:|" + "---:|" * bool(recorded))
        for key, t in pb["timings"].items():
            cells = [t[k] for k in ("ours_encode", "encode", "ours_decode", "decode_plain",
                                    "decode_strict", "parse_only")]
            mine = ours["timings"][key]
            last = f" | {_ms(mine['encode'])} / {_ms(mine['decode'])}" if recorded else ""
            print(f"| {_case(key)} | {' | '.join(_ms(c) for c in cells)}{last} |")
    else:
        print("| groups | limits | ours encode | ours decode |")
        print("|---:|:---:|---:|---:|")
        for key, t in ours["timings"].items():
            print(f"| {_case(key)} | {_ms(t['encode'])} | {_ms(t['decode'])} |")
    if not pb:
        return
    print("\n### Usage report: what each decoder refuses\n")
    print("| a payload with … | codec's decoder | protobuf as it is | protobuf + checks by hand "
          "| refused by |")
    print("|---|---|---|---|---|")
    for row in pb["strictness"]:
        print(f"| {row['case']} | {row['ours']} | {row['plain']} | {row['strict']} | "
              f"{row['by']} |")
    plain = sum(row["plain"] == "refused" for row in pb["strictness"])
    strict = sum(row["strict"] == "refused" for row in pb["strictness"])
    rows = pb["strictness"]
    fixed = sum(row["ours"].startswith("cannot") for row in rows)
    print(f"\nOf {len(rows)} payloads, codec's decoder refuses {len(rows) - fixed} with their "
          f"reason (truncated, unknown_version, malformed) and {fixed} cannot occur in its "
          f"layout; protobuf as it is refuses {plain}, with the checks by hand {strict}, all "
          f"with one reason (its parser says only that a message is corrupt).")
    for key, what in (("prefixes", "a 3-group report"), ("goodbye_prefixes", "a goodbye")):
        pre, mine = pb[key], ours[key]
        print(f"Cut-off copies of {what} (every strict prefix) accepted as a report: ours "
              f"{mine['accepted']} of {mine['count']}; protobuf as it is {pre['plain']} of "
              f"{pre['count']}, with the checks {pre['strict']} of {pre['count']}.")


def config_tables(ours: dict[str, Any], pd: dict[str, Any] | None, recorded: bool) -> None:
    print("\n### Config: validation of the slice, ms\n")
    if pd:
        print("Both sides timed in one process, one after the other"
              + (", recorded; ours as measured now in the last column." if recorded else "."))
    now = " | ours now" if recorded or not pd else ""
    print(f"\n| config | {'ours | pydantic' if pd else ''}{now} |".replace("|  |", "|"))
    print("|---|" + "---:|" * (2 * bool(pd) + bool(now)))
    for name, seconds in ours["timings"].items():
        cells = [_ms(pd["timings"][name]["ours"]), _ms(pd["timings"][name]["pydantic"])] \
            if pd else []
        cells += [_ms(seconds)] if now else []
        print(f"| {name} | {' | '.join(cells)} |")
    if not pd:
        return
    cases = pd["cases"]
    exact = [n for n, c in cases.items() if c["got"] == c["expected"]]
    reordered = [n for n, c in cases.items() if c["got"] != c["expected"]
                 and sorted(c["got"]) == sorted(c["expected"])]
    tested = [n for n in cases if not n.startswith("(added)")]
    print(f"\n### Config: today's error lines, compared whole\n\n{len(tested)} cases from "
          f"tests/unit/test_config.py inside the slice, {len(cases) - len(tested)} added. "
          f"The same lines: {len(exact)} of {len(cases)} ({sum(n in tested for n in exact)} "
          f"of {len(tested)} from the tests); the same lines in another order: "
          f"{len(reordered)}. The others:\n")
    print("| case | today | pydantic prototype |")
    print("|---|---|---|")
    for name, case in cases.items():
        if name not in exact:
            print(f"| {name} | {'<br>'.join(case['expected'])} | "
                  f"{'<br>'.join(case['got']) or '(accepted)'} |")


def common_table(wire: dict[str, Any], config: dict[str, Any],
                 pb: dict[str, Any] | None, pd: dict[str, Any] | None) -> None:
    print("\n### Code and weight\n")
    print("Lines: code lines (no blank, comment or docstring lines) / as `wc -l`. Import: what "
          "the module adds to a fresh interpreter that has the dataclasses (and, for the "
          "config, values.py) already, best of 5. Installed: what pip puts on disk for the "
          "dependency (protoc, needed to build, not counted).\n")
    print("| | lines | import, ms | installed dependency |")
    print("|---|---:|---:|---:|")

    def row(label: str, lines: dict[str, int], seconds: float | None = None,
            size: int | None = None, what: str = "") -> None:
        took = f"{seconds * 1000:.0f}" if seconds is not None else "–"
        weight = f"{size / 2**20:.1f} MiB{what}" if size is not None else "–"
        print(f"| {label} | {lines['code']} / {lines['total']} | {took} | {weight} |")

    row("wire: codec.py + decoder.py (import: the transport package)", wire["lines"],
        wire["import_seconds"])
    row("… of which protobuf would replace (decoder.py, encode and its helpers)",
        wire["replaced_lines"])
    if pb:
        row("wire: protobuf prototype, .py + .proto (import: runtime + protoc's output; "
            "its lines not counted)", pb["lines"],
            pb["import_seconds"], pb["installed_bytes"], " (protobuf)")
    row("config: reader.py + sections.py, every section (import: sections.py)",
        config["lines"], config["import_seconds"])
    row("… of which the slice (reader.py + the slice's section readers)", config["slice_lines"])
    row("config: values.py, units.py, load.py, auth.py (kept either way)", config["kept_lines"])
    if pd:
        row("config: pydantic prototype, the slice (reuses values.py and units.py; import: "
            "pydantic + building the models)",
            pd["lines"], pd["import_seconds"], pd["installed_bytes"],
            " (pydantic, pydantic-core, annotated-types, typing-inspection)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", help="a venv with protobuf, grpcio-tools and pydantic: "
                                       "measure the rivals with it (ours beside them)")
    parser.add_argument("--record", action="store_true",
                        help=f"with --venv: keep the rivals' figures in {RECORDED.name}")
    args = parser.parse_args()
    bodies = config_bodies()
    wire, config = ours_wire(), ours_config(bodies)
    if args.venv:
        other, recorded = rivals(args.venv, bodies), False
        other["on"] = time.strftime("%Y-%m-%d")
        if args.record:
            RECORDED.write_text(json.dumps(other, indent=1, ensure_ascii=False) + "\n")
        print(f"Rivals measured now with {args.venv}: {other['protobuf']['versions']}, "
              f"{other['pydantic']['versions']}.")
    elif RECORDED.exists():
        other, recorded = json.loads(RECORDED.read_text()), True
        print(f"**The rivals' figures are RECORDED** on {other['on']} ({RECORDED.name}: "
              f"{other['protobuf']['versions']}, {other['pydantic']['versions']}); ours are "
              "measured now. Give --venv to measure both now.")
    else:
        other, recorded = {"protobuf": None, "pydantic": None}, False
        print(f"Ours only: no --venv and no {RECORDED.name}.")
    wire_tables(wire, other["protobuf"], recorded)
    config_tables(config, other["pydantic"], recorded)
    common_table(wire, config, other["protobuf"], other["pydantic"])


if __name__ == "__main__":
    main()
