"""Fakes: stand-ins for servers, not the servers themselves. Each serves recorded,
documented real output of a component that cannot run here (tests/fixtures/SOURCES.md)."""
