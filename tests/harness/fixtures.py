"""Where the recorded real Pulsar output lives: inside the repository, so that tests and
replays run from any checkout (tests/fixtures/SOURCES.md says where each file came from)."""
from pathlib import Path

FIXTURES: Path = Path(__file__).resolve().parents[1] / "fixtures"

# A self-signed certificate and its key, made once with openssl for tests that only need
# files that load as a TLS pair (config validation): published, so protecting nothing.
THROWAWAY_CERT: Path = FIXTURES / "tls" / "throwaway.crt"
THROWAWAY_KEY: Path = FIXTURES / "tls" / "throwaway.key"
