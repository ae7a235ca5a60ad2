"""OpenMetrics 1.0.0 when the scraper asks for it (Accept negotiation): the cycle's body
with counter and info families renamed, `# EOF` at the end, parsed by prometheus-client's
OpenMetrics parser; the classic text format for everyone else."""

from __future__ import annotations

import gzip

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from exporter.exposition.negotiation import prefers_openmetrics
from exporter.exposition.render import OPENMETRICS_CONTENT_TYPE, openmetrics
from exporter.server.http import build_server
from exporter.server.published import PublishedState
from tests.unit.test_cycle import body, exporter_for
from tests.unit.test_server import request

# What Prometheus 2.42 (Debian bookworm's) sends.
PROMETHEUS = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
              "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


@pytest.mark.parametrize(("accept", "expected"), [
    (PROMETHEUS, True),
    ("application/openmetrics-text; version=1.0.0", True),
    (None, False),  # curl, wget, browsers' defaults
    ("*/*", False),
    ("text/plain;version=0.0.4", False),
    ("text/plain;q=1,application/openmetrics-text;q=0.5", False),
    ("application/openmetrics-text;q=0", False),
    ("application/openmetrics-text;q=junk", False),
])
def test_who_gets_openmetrics(accept, expected):
    assert prefers_openmetrics(accept) is expected


@pytest.fixture(scope="module")
def cycle_body() -> bytes:
    exporter, _, _ = exporter_for([body(10), body(30)], enforce=True)
    exporter.cycle()
    return exporter.cycle().body


def test_a_whole_cycle_parses_as_openmetrics(cycle_body):
    text = openmetrics(cycle_body).decode()
    assert text.endswith("\n# EOF\n") and text.count("# EOF") == 1
    families = {f.name: f for f in text_string_to_metric_families(text)}
    evictions = families["pulsar_storage_backlog_quota_exceeded_evictions"]
    assert evictions.type == "counter" and evictions.samples
    assert all(s.name.endswith("_total") for s in evictions.samples)
    assert families["pulsar_quota_exporter_build"].type == "info"
    assert families["python"].type == "info"
    check = families["pulsar_storage_backlog_quota_check_duration_seconds"]
    assert check.type == "histogram" and check.samples
    assert families["process_resident_memory_bytes"].type == "gauge"
    classic = sum(1 for line in cycle_body.decode().splitlines()
                  if line and not line.startswith("#"))
    assert sum(len(f.samples) for f in families.values()) == classic  # nothing lost


def _whole_body_rewrite(body: bytes) -> bytes:
    """The conversion as regular expressions over the whole body (what `openmetrics` did
    before it searched for the header lines): the reference it must equal."""
    from exporter.exposition import render as r

    body = r._SUFFIXED_FAMILY.sub(r._family, body)
    return r._HELP.sub(lambda m: m.group(1) + r._HELP_ESCAPE.sub(
        lambda e: b'\\"' if e.group() == b'"' else e.group(), m.group(2)), body) + b"# EOF\n"


@pytest.mark.parametrize("text", [
    b"", b"a 1\n", b"# HELP only", b"# HELP a_total x\n# TYPE a_total counter",
    b'x 1\n# HELP b_info y "q"\n# TYPE b_info gauge\nb_info{a="1"} 1\n# HELP c z\n',
    b"# TYPE d gauge\nd 1\n# HELP e_total w\n# TYPE e_total gauge\ne_total 2\n"])
def test_only_the_header_lines_are_rewritten(text: bytes, cycle_body: bytes) -> None:
    assert openmetrics(text) == _whole_body_rewrite(text)
    assert openmetrics(cycle_body) == _whole_body_rewrite(cycle_body)


def test_help_quotes_are_escaped_and_other_bytes_untouched():
    text = b'# HELP a_total Says "x" and \\\\ and \\n.\n# TYPE a_total counter\na_total 1\n'
    om = openmetrics(text)
    assert om == (b'# HELP a Says \\"x\\" and \\\\ and \\n.\n# TYPE a counter\na_total 1\n'
                  b"# EOF\n")
    (family,) = text_string_to_metric_families(om.decode())
    assert family.documentation == 'Says "x" and \\ and \n.'


def test_served_by_accept_plain_and_gzipped(cycle_body):
    state = PublishedState(check_interval=10.0)
    server = build_server("127.0.0.1:0", state).start()
    try:
        state.publish(cycle_body, dict)
        status, headers, got = request(server, headers={"Accept": PROMETHEUS})
        assert status == 200 and headers["content-type"] == OPENMETRICS_CONTENT_TYPE
        assert got == openmetrics(cycle_body) and "Accept" in headers["vary"]
        _, headers, zipped = request(server, headers={"Accept": PROMETHEUS,
                                                      "Accept-Encoding": "gzip"})
        assert headers["content-encoding"] == "gzip" and gzip.decompress(zipped) == got
        _, headers, classic = request(server)
        assert classic == cycle_body and headers["content-type"].startswith("text/plain")
        state.publish(cycle_body + b"extra 1\n", dict)  # the next cycle is converted anew
        _, _, again = request(server, headers={"Accept": PROMETHEUS})
        assert b"extra 1\n# EOF\n" in again
    finally:
        server.shutdown()
