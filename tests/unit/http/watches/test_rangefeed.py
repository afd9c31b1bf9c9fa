"""A range watch's change events (http/watches/rangefeed.py) on a table of Kafka Streams
sessions: each event shows its session's own end, read from the stored value."""

from __future__ import annotations

import orjson

from sparkiq.core.serde import window_store_key
from sparkiq.http.watches.rangefeed import WatchedRange
from tests.support.kstreamstables import session_table


def test_a_session_change_shows_its_start_end_and_value() -> None:
    sessions = session_table(partitions=1)
    watched = WatchedRange(sessions, (0,), None, None, None, "/v1/tables/sessions/changes", {})
    key = window_store_key(b"alice", 1_000)
    stored = (4_500).to_bytes(8, "big") + (3).to_bytes(8, "big")
    event = orjson.loads(watched.change(0, key, stored, 7, "n1", False))
    assert (event["key"], event["start"], event["end"], event["value"]) == (
        "alice",
        1_000,
        4_500,
        3,
    )
    gone = orjson.loads(watched.change(0, key, None, 8, "n1", False))
    assert (gone["start"], gone["value"]) == (1_000, None)
