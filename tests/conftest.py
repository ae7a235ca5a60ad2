"""Fixtures shared by every test directory."""

from tests.harness.apache_pulsar import apache_pulsar_fixture

# One real Apache Pulsar standalone broker per session (about 15 s to start, 0.5 GB resident),
# started only when a test asks for it; a missing install fails that test, never skips it.
apache_pulsar = apache_pulsar_fixture(scope="session")
