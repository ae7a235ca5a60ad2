"""A fleet of exporter processes sharing resource-group quotas over a real broker.

Each participant speaks for its own pulsar-lite broker (its usage source); broker 0 also
carries the non-persistent usage topic. A pacer per participant produces at
min(demand, local quota), reading the quota from its exporter's status: it plays the
broker's resource-group rate limiter, so a participant that is given less than it wants
uses exactly its limit, which is what makes the 80/20 case "stuck" under Pulsar's rule.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pulsar

from tests.harness.exporter_process import ExporterProcess
from tests.harness.pulsar import Metrics, PulsarLite
from tests.harness.wait import poll

RG = "rg-shared"
TENANT = "public"


def _config(name: str, broker: PulsarLite, usage_broker: PulsarLite, quota: float,
            allocator: str, interval: float, stale_after: float,
            secret_file: Path | None = None) -> dict:
    signing = {} if secret_file is None else {"report_signing": {
        "secret_file": str(secret_file), "rotation_grace": f"{interval * 4}s"}}
    return {
        "cluster": "fleet",
        "check_interval": f"{interval}s",
        "sources": {"brokers": [{"url": broker.metrics_url, "timeout": f"{interval * 0.8}s"}],
                    "service_url": usage_broker.service_url},
        "resource_groups": {RG: {"publish": {"messages_per_second": int(quota)},
                                 "tenants": [TENANT]}},
        "resource_group_engine": {"participant": name, "report_interval": f"{interval}s",
                                  "stale_after": f"{stale_after}s", "max_suppressed_rounds": 3,
                                  "allocator": allocator, **signing},
    }


@dataclass
class Member:
    """One participant: its exporter process (tests/harness/exporter_process.py), the broker
    it speaks for, and the demand its pacer produces at."""

    name: str
    broker: PulsarLite
    exporter: ExporterProcess
    demand: float
    stop_pacer: threading.Event = field(default_factory=threading.Event)
    sent: int = 0
    stopped: bool = False  # stopped on purpose by the test

    @property
    def url(self) -> str:
        return self.exporter.url

    @property
    def config_path(self) -> Path:
        return self.exporter.config_path

    def status(self) -> dict | None:
        try:
            return self.exporter.status()
        except OSError:
            return None

    def group(self) -> dict | None:
        status = self.status()
        for g in (status or {}).get("resource_groups", []):
            if g["resource_group"] == RG and g["monitoring_class"] == "publish":
                return g
        return None

    def local_quota(self) -> float | None:
        g = self.group()
        if g is None or g["local_quota"] is None:
            return None
        return g["local_quota"]["messages_per_second"]

    def scrape(self) -> Metrics:
        return self.exporter.scrape()

    def sample(self, name: str, **labels: str) -> float | None:
        """The one sample of `name` matching `labels` (None: absent or ambiguous)."""
        return self.scrape().value(name, **labels)

    def alive(self) -> bool:
        return self.exporter.running

    def log_tail(self, n: int = 40) -> str:
        return self.exporter.log_tail(n)


class Fleet:
    def __init__(self, workdir: Path, demands: dict[str, float], *, quota: float,
                 allocator: str, interval: float = 8.0, stale_after: float = 40.0,
                 secret: str | None = None) -> None:
        """`secret`: reports signed; each member has its own secret file (`secret_file`),
        so a test can rotate them one at a time as a rolling update does."""
        self.workdir = workdir
        self.secret = secret
        self.quota = quota
        self.allocator = allocator
        self.interval = interval
        self.stale_after = stale_after
        self.brokers = [PulsarLite(workdir / f"broker-{i}") for i in range(len(demands))]
        self.members: dict[str, Member] = {}
        self._demands = demands
        self._pacers: list[threading.Thread] = []

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> Fleet:
        for b in self.brokers:
            b.start()
        for i, (name, demand) in enumerate(self._demands.items()):
            exporter = ExporterProcess(self.workdir, self._config(name, i, self.quota),
                                       name=name)
            member = Member(name, self.brokers[i], exporter, demand)
            self.members[name] = member
            exporter.start()
            t = threading.Thread(target=self._pace, args=(member,), daemon=True)
            t.start()
            self._pacers.append(t)
        return self

    def _config(self, name: str, index: int, quota: float) -> dict:
        secret_file = None
        if self.secret is not None:
            secret_file = self.secret_file(name)
            if not secret_file.exists():
                self.write_secret(name, self.secret)
        return _config(name, self.brokers[index], self.brokers[0], quota, self.allocator,
                       self.interval, self.stale_after, secret_file)

    def secret_file(self, name: str) -> Path:
        return self.workdir / f"{name}.secret"

    def write_secret(self, name: str, text: str) -> None:
        """Replace a member's secret file at once (as a Secret volume update does)."""
        tmp = self.secret_file(name).with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.secret_file(name))

    def set_quota(self, quota: float) -> None:
        """Every member's file rewritten at once (as a ConfigMap update is) with `quota`."""
        self.quota = quota
        for i, m in enumerate(self.members.values()):
            m.exporter.write_config(self._config(m.name, i, quota))

    def kill(self, name: str, sig: int) -> int:
        member = self.members[name]
        member.stopped = True
        member.stop_pacer.set()
        member.exporter.signal(sig)
        return member.exporter.wait_exit(timeout=60)

    def close(self) -> None:
        for m in self.members.values():
            m.stop_pacer.set()
        for m in self.members.values():
            m.exporter.stop(grace=0)
        for t in self._pacers:
            t.join(timeout=10)
        for b in self.brokers:
            b.stop()

    # --- the workload ---------------------------------------------------------------------
    def _pace(self, member: Member) -> None:
        """Produce at min(demand, local quota); the quota is re-read every second."""
        client = pulsar.Client(member.broker.service_url,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        try:
            producer = client.create_producer(
                f"persistent://{TENANT}/default/load-{member.name}", batching_enabled=True,
                batching_max_publish_delay_ms=20, block_if_queue_full=True)
            next_read, limit = 0.0, None
            credit, last = 0.0, time.monotonic()
            while not member.stop_pacer.is_set():
                now = time.monotonic()
                if now >= next_read:
                    limit = member.local_quota()
                    next_read = now + 1.0
                rate = member.demand if limit is None else min(member.demand, limit)
                credit = min(credit + (now - last) * rate, max(rate, 1.0))
                last = now
                while credit >= 1.0:
                    producer.send_async(b"x" * 64, lambda *_: None)
                    member.sent += 1
                    credit -= 1.0
                time.sleep(0.02)
            producer.flush()
        except Exception as e:  # a pacer dying must show in the test's failure message
            member.demand = -1
            print(f"pacer {member.name} failed: {e!r}", file=sys.stderr)
        finally:
            client.close()

    # --- waiting ----------------------------------------------------------------------------
    def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float) -> float:
        """Poll until `predicate()`; seconds it took. A member between restarts, or not yet
        listing a peer (OSError, KeyError), is "not yet"; a member that died unasked fails at
        once. Fails with the quotas and every member's log tail."""
        t0 = time.monotonic()

        def holds() -> bool:
            dead = [m.name for m in self.members.values() if not m.alive() and not m.stopped]
            if dead:
                raise AssertionError(f"{', '.join(dead)} died while waiting for {what}\n"
                                     f"{self._tails()}")
            return predicate()

        poll(holds, what, timeout, interval=0.5, ignore=(OSError, KeyError),
             show=lambda: f"quotas: {self.quotas()}\n{self._tails()}")
        return time.monotonic() - t0

    def _tails(self) -> str:
        return "\n".join(f"--- {m.name} ({'alive' if m.alive() else 'dead'}) ---\n"
                         f"{m.log_tail()}" for m in self.members.values())

    def quotas(self) -> dict[str, float | None]:
        return {n: m.local_quota() for n, m in self.members.items() if m.alive()}

    def peers_known(self, name: str) -> float | None:
        return self.members[name].sample("pulsar_quota_exporter_usage_peers")
