"""The cluster tests' failure report (tests/harness/jvmlogs.py), on lines of the formats
Apache Pulsar 4.0.8's brokers wrote in this suite's runs."""

from datetime import datetime

from tests.harness.jvmlogs import notable

BEGAN = datetime.fromisoformat("2026-11-29T03:05:00+00:00").timestamp()
CONSOLE = [
    "2026-11-29T03:04:59,999+0000 [pulsar-io-3-1] WARN  org.apache.pulsar.X - before the test",
    "2026-11-29T03:05:00,000+0000 [pulsar-io-3-1] WARN  org.apache.pulsar.X - at its start",
    "2026-11-29T03:05:01,569+0000 [main] INFO  org.apache.pulsar.X - info, not shown",
    "2026-11-29T03:05:02,001+0000 [main] ERROR org.apache.pulsar.X - failed",
    "java.lang.IllegalStateException: a stack trace's line, without a time",
    "2026-11-29T03:05:03,000+0000 [main] DEBUG org.apache.pulsar.X - WARN in the text only",
]
GC = [
    "[2026-11-29T03:05:10.013+0000][600.230s][gc,start    ] GC(9) Pause Young (Normal) "
    "(G1 Evacuation Pause)",
    "[2026-11-29T03:05:10.093+0000][600.310s][gc          ] GC(9) Pause Young (Normal) "
    "(G1 Evacuation Pause) 9M->8M(66M) 79.493ms",
    "[2026-11-29T03:05:40.093+0000][630.310s][gc          ] GC(10) Pause Full (G1 "
    "Compaction Pause) 500M->400M(512M) 31250.100ms",
    "[2026-11-29T03:05:40.095+0000][630.312s][safepoint   ] Safepoint \"G1CollectFull\", "
    "Time since last: 203679204 ns, Reaching safepoint: 2203 ns, Cleanup: 20461 ns, "
    "At safepoint: 31251690323 ns, Total: 31251712987 ns",
    "[2026-11-29T03:05:41.000+0000][631.000s][safepoint   ] Safepoint \"Cleanup\", "
    "Time since last: 1 ns, Reaching safepoint: 2 ns, Cleanup: 3 ns, At safepoint: 4 ns, "
    "Total: 499999999 ns",
]


def test_warnings_and_errors_from_the_tests_start_on():
    assert notable(CONSOLE, BEGAN) == [CONSOLE[1], CONSOLE[3]]


def test_pauses_and_safepoints_of_half_a_second_or_more():
    assert notable(GC, BEGAN) == [GC[2], GC[3]]
    assert notable(GC, BEGAN, slowest=0.05) == GC[1:]
    assert notable(GC, datetime.fromisoformat("2026-11-29T03:06:00+00:00").timestamp()) == []
