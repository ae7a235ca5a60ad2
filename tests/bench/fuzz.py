"""Fuzz run (issue 13 §6): every kind of input the exporter reads, mutated from real inputs,
for a bounded time each; the exporter must never crash and must count every rejection by
a reason of its closed set.

Not a test: prints a table. A plain mutation loop (`random.Random`, seeded) over the seeds
and runners of tests/fuzz/inputs.py, which the hypothesis tests in tests/fuzz use too:

- metrics: runs of 1–80 lines (mostly short; now and then the whole body) of the four
  recorded broker bodies in tests/fixtures, byte- and line-mutated with exposition tokens, then
  sniffed, cut into pieces and parsed as a broker task does, then merged, decided (two
  cycles) and published (the /metrics body, the status JSON). "rejected" counts whole
  bodies (reason `malformed`, ScrapeError); skipped lines are listed below the table by
  MalformedReason.
- admin: the recorded topic stats and partitioned stats and the other admin answers as
  Apache Pulsar 4.0.8 gives them, mutated as JSON text or as documents, through
  `json.loads` + `classify` and the endpoint's converter (reasons: SCRAPE_ERROR_REASONS).
- reports: realistic usage reports (fresh, old, goodbyes, claiming to be us), encoded,
  sealed or not and byte-mutated, through `UsageExchange.receive` of a signed and an
  unsigned exchange (reasons: REPORT_REJECT_REASONS); re-sent ones test the replay rule.
- broker reports: the Apache Pulsar 4.0.8 `ResourceUsageInfo` payloads recorded in
  tests/fixtures, byte-mutated, through `BrokerReports.take` (BROKER_REPORT_REJECT_REASONS).
- config: examples/reference.yaml and the demo's config, mutated as YAML text (through
  `load`) or as loaded mappings (through `parse`). Config errors have no closed reason
  set: they are counted by a rough kind of their first line.

A crash is any exception other than the documented one; it is listed with the exporter
function it came from ("known" when tests/fuzz/test_fuzz_found.py shows it already). A
violation is an answer that breaks the contract (a reason outside the closed set, an
accepted report that re-encodes to other bytes, a config error without file and key path).

    .venv/bin/python -m tests.bench.fuzz --seconds 30
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.fuzz import inputs
from tests.fuzz.inputs import Outcome, Violation


@dataclass
class Tally:
    tried: int = 0
    outcome: Outcome = field(default_factory=Outcome)
    crashes: Counter = field(default_factory=Counter)  # crash site → inputs
    violations: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)  # crash site or violation → one input


def metrics(rng: random.Random) -> tuple[object, Callable[[], Outcome]]:
    size = 0 if rng.random() < 0.03 else rng.randint(1, rng.choice((5, 20, 80)))
    seed = inputs.metrics_seed(rng.randrange(4), rng.randrange(1 << 20), size)
    body = inputs.apply_bytes(seed, inputs.random_byte_ops(rng), inputs.METRICS_WORDS)
    piece = rng.choice((256, 4096, 4096, 1 << 20))
    return body, lambda: inputs.metrics_body(body, piece)


def admin(rng: random.Random) -> tuple[object, Callable[[], Outcome]]:
    kind, body = rng.choice(inputs.admin_seeds())
    if rng.random() < 0.5:
        body = inputs.apply_bytes(body, inputs.random_byte_ops(rng, 3), inputs.ADMIN_WORDS)
    else:
        doc = inputs.apply_tree(json.loads(body), inputs.random_tree_ops(rng),
                                inputs.ADMIN_VALUES, inputs.ADMIN_KEYS)
        body = json.dumps(doc).encode()
    return (kind, body), lambda: inputs.admin_answer(kind, body)


class Reports:
    """Two long-lived exchanges (signed, unsigned) fed one payload per input; now and then
    an earlier payload again (the gate's replay rule)."""

    def __init__(self) -> None:
        self.exchanges = (inputs.exchange(signed=True), inputs.exchange(signed=False))
        self.sequence = 10**12
        self.sent: list[bytes] = []

    def __call__(self, rng: random.Random) -> tuple[object, Callable[[], Outcome]]:
        exch, channel = rng.choice(self.exchanges)
        if self.sent and rng.random() < 0.05:
            payload = rng.choice(self.sent)
        else:
            self.sequence += rng.randint(1, 3)
            report = inputs.report_seed(rng, self.sequence)
            mode = rng.choice(inputs.SIGNING_MODES)
            ops = inputs.random_byte_ops(rng, 3) if rng.random() < 0.8 else []
            payload = inputs.report_payload(report, ops, mode)
            self.sent = [*self.sent[-99:], payload]
        return payload, lambda: inputs.receive(exch, channel, [payload])


def broker_reports(rng: random.Random) -> tuple[object, Callable[[], Outcome]]:
    seed = rng.choice(inputs.broker_report_seeds())
    ops = inputs.random_byte_ops(rng, 3) if rng.random() < 0.9 else []
    payload = inputs.apply_bytes(seed, ops, inputs.REPORT_WORDS)
    return payload, lambda: inputs.broker_report(payload)


def config(rng: random.Random) -> tuple[object, Callable[[], Outcome]]:
    if rng.random() < 0.5:
        text = inputs.apply_bytes(rng.choice(inputs.config_texts()),
                                  inputs.random_byte_ops(rng, 4), inputs.CONFIG_WORDS)
        return text, lambda: inputs.config_file(text, inputs.config_path())
    data = inputs.apply_tree(rng.choice(inputs.config_mappings()), inputs.random_tree_ops(rng),
                             inputs.CONFIG_VALUES, inputs.CONFIG_KEYS)
    return data, lambda: inputs.config_mapping(data)


def fuzz(make: Callable[[random.Random], tuple[object, Callable[[], Outcome]]],
         seconds: float, rng: random.Random) -> Tally:
    tally = Tally()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        given, run = make(rng)
        tally.tried += 1
        try:
            tally.outcome.add(run())
        except Violation as v:
            key = str(v)[:120]
            tally.violations[key] += 1
            tally.examples.setdefault(key, given)
        except Exception as exc:
            site = inputs.crash_site(exc)
            tally.crashes[site] += 1
            tally.examples.setdefault(site, given)
    return tally


def _reasons(counts: Counter) -> str:
    return ", ".join(f"{r}: {n:,}" for r, n in sorted(counts.items(), key=lambda kv: -kv[1])) \
        or "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="per input kind")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--kinds", nargs="*", default=None,
                        help="metrics admin reports broker_reports config (default: all)")
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)  # every rejection logs; the table says it all
    kinds = {"metrics": metrics, "admin": admin, "reports": Reports(),
             "broker_reports": broker_reports, "config": config}
    chosen = args.kinds or list(kinds)
    rng = random.Random(args.seed)
    tallies = {}
    for kind in chosen:
        tallies[kind] = fuzz(kinds[kind], args.seconds, rng)
        print(f"  {kind}: {tallies[kind].tried:,} inputs in {args.seconds:g} s", flush=True)

    print(f"\nFuzz run: {args.seconds:g} s per kind, seed {args.seed}")
    print(f"{'kind':15} {'tried':>8} {'accepted':>9} {'crashes':>8} {'violations':>10}  "
          "rejected by reason")
    for kind, t in tallies.items():
        print(f"{kind:15} {t.tried:>8,} {t.outcome.accepted:>9,} {t.crashes.total():>8,} "
              f"{t.violations.total():>10,}  {_reasons(t.outcome.rejected)}")
    if "metrics" in tallies:
        print(f"  metrics, lines skipped in accepted bodies: "
              f"{_reasons(tallies['metrics'].outcome.lines)}")
    for kind, t in tallies.items():
        for site, n in t.crashes.most_common():
            label = "known" if site in inputs.KNOWN_CRASHES else "NEW"
            print(f"  crash ({label}) {kind}: {site} × {n:,}, e.g. "
                  f"{_short(t.examples[site])}")
        for text, n in t.violations.most_common():
            print(f"  violation {kind}: {text} × {n:,}, e.g. {_short(t.examples[text])}")


def _short(given: object, limit: int = 160) -> str:
    text = repr(given)
    return text if len(text) <= limit else text[:limit] + "…"


if __name__ == "__main__":
    main()
