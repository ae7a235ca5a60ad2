"""A batched backlog read as messages for the age estimate (`decide._messages_per_entry`):
Pulsar counts the backlog in entries and the publish counter in messages."""

from __future__ import annotations

from exporter.engine.decide import _messages_per_entry


def test_a_batched_backlog_is_scaled_by_its_bytes():
    # 4.0.8: 30 entries of 10 messages of 112.659 bytes each (backlogSize 33798 bytes)
    assert abs(_messages_per_entry([("stalled", 30.0)], 33797.7, 112.659) - 10.0) < 1e-9


def test_the_slowest_subscription_sets_the_factor_for_all():
    subs = [("fast", 3.0), ("slow", 30.0)]
    assert _messages_per_entry(subs, 30 * 5 * 100.0, 100.0) == 5.0


def test_unbatched_or_unknown_is_one():
    assert _messages_per_entry([("s", 30.0)], 3000.0, 100.0) == 1.0  # one message per entry
    assert _messages_per_entry([("s", 30.0)], 2000.0, 100.0) == 1.0  # never below one
    assert _messages_per_entry([("s", 30.0)], None, 100.0) == 1.0  # pulsar-lite: no size
    assert _messages_per_entry([("s", 0.0)], 3000.0, 100.0) == 1.0  # no backlog
    assert _messages_per_entry([], 3000.0, None) == 1.0
