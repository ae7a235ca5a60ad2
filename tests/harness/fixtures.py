"""Where the recorded real Pulsar output lives: inside the repository, so that tests and
replays run from any checkout (tests/fixtures/SOURCES.md says where each file came from)."""
from pathlib import Path

FIXTURES: Path = Path(__file__).resolve().parents[1] / "fixtures"
