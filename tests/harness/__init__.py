"""Real components started by tests on loopback (pulsar-lite today)."""
