"""Bodies with a real Apache Pulsar 4.0.8 broker's families, at any topic count: the recorded
/metrics of tests/fixtures/apache-pulsar-4.0-metrics.txt, its two topics' lines printed for
`topics` topics, for benchmarks that ask how the parse fares on what a broker prints (67
per-topic families, ~95 samples a topic, most of them families the exporter does not read),
not on the synthetic body's 49 samples a topic (synthetic.py).

Every line that names no topic is kept as recorded, once. Each run of lines naming a topic
(a family's samples: Pulsar prints a family for every topic before the next family) is
printed for topic 0, 1, … in turn, topic i taking the lines of the recorded topic i % 2 with
its name suffixed `-i`: the even topics are `kept`'s (40 messages of backlog, a 10 MiB
size quota), the odd ones `aged`'s (a 2 s time quota, evicted once), each in its namespace.
"""

from __future__ import annotations

import io

from tests.harness.fixtures import FIXTURES

RECORDED = FIXTURES / "apache-pulsar-4.0-metrics.txt"
TEMPLATES = ("persistent://public/pip323-kept-2fef1917/kept",
             "persistent://public/pip323-age-a5f53a0d/aged")


def topic_name(i: int) -> str:
    """The name of topic `i` in a body made here."""
    return f"{TEMPLATES[i % 2]}-{i}"


def recorded_family_body(topics: int) -> str:
    """The recorded body with its per-topic lines for `topics` topics (see above)."""
    out = io.StringIO()
    run: list[str] = []

    def flush() -> None:
        by_template = [[line for line in run if f'topic="{t}"' in line] for t in TEMPLATES]
        if sum(map(len, by_template)) != len(run):
            raise ValueError("a line names a topic the fixture does not record")
        for i in range(topics):
            k = i % 2
            was, now = f'topic="{TEMPLATES[k]}"', f'topic="{topic_name(i)}"'
            for line in by_template[k]:
                out.write(line.replace(was, now))
                out.write("\n")
        run.clear()

    for line in RECORDED.read_text().splitlines():
        if not line.startswith("#") and 'topic="' in line:
            run.append(line)
            continue
        if run:
            flush()
        out.write(line)
        out.write("\n")
    if run:
        flush()
    return out.getvalue()
