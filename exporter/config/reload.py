"""Config reload without a restart: on SIGHUP, or when the file's content changes.

The file is read and hashed at the start of every cycle (a few KiB: cheaper than any
watch API, and it sees what a stat would miss, such as Kubernetes swapping a ConfigMap's
symlink). A change is validated like at start-up; a config that fails validation is
logged, counted and ignored, and the running config stays until the file changes again.

Settings bound at start-up (the listen address, TLS and auth, the Spark context, the
check interval that paces the scheduler) keep their running values; the reload says which
of them changed so the log can ask for a restart.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from exporter.config.load import ConfigError, load
from exporter.config.settings import Config

log = logging.getLogger(__name__)

RESTART_ONLY = ("check_interval", "exposition", "spark")


@dataclass(frozen=True)
class Unchanged:
    pass


@dataclass(frozen=True)
class Reloaded:
    config: Config
    needs_restart: tuple[str, ...]  # top-level keys that changed but keep running values


@dataclass(frozen=True)
class ReloadRejected:
    errors: tuple[str, ...]


ReloadOutcome = Unchanged | Reloaded | ReloadRejected


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class ConfigFile:
    def __init__(self, path: str | Path, running: Config,
                 adjust: Callable[[Config], Config] = lambda c: c, *,
                 expand: bool = False) -> None:
        """`adjust` re-applies command-line overrides (e.g. --web.listen-address) to
        every loaded config, so a reload never undoes them; `expand`: environment
        references are replaced at every load (--config.expand-env)."""
        self.path = Path(path)
        self.running = running
        self._adjust = adjust
        self._expand = expand
        self._seen = _digest(self.path)
        self._requested = threading.Event()

    def request(self) -> None:
        """Ask for a reload at the next poll, even if the content looks unchanged (SIGHUP).
        Safe from a signal handler."""
        self._requested.set()

    def poll(self) -> ReloadOutcome:
        digest = _digest(self.path)
        requested = self._requested.is_set()
        self._requested.clear()
        if digest == self._seen and not requested:
            return Unchanged()
        self._seen = digest
        try:
            loaded = self._adjust(load(self.path, expand=self._expand))
        except ConfigError as e:
            for line in e.errors:
                log.error("config reload rejected, keeping the running config: %s", line)
            return ReloadRejected(tuple(e.errors))
        kept = {key: getattr(self.running, key) for key in RESTART_ONLY}
        needs_restart = tuple(k for k in RESTART_ONLY if getattr(loaded, k) != kept[k])
        # who we speak for is our identity towards peers: renaming needs a restart too
        participant = self.running.resource_group_engine.participant
        if loaded.resource_group_engine.participant != participant:
            needs_restart += ("resource_group_engine.participant",)
        engine = dataclasses.replace(loaded.resource_group_engine, participant=participant)
        config = dataclasses.replace(loaded, resource_group_engine=engine, **kept)
        if needs_restart:
            log.warning("config reload: %s changed; they take effect after a restart",
                        ", ".join(needs_restart))
        if config == self.running and not requested:
            return Unchanged()
        self.running = config
        log.info("config reloaded from %s", self.path)
        return Reloaded(config, needs_restart)
