"""A range watch's change events (http/watches/rangefeed.py) on a table of Kafka Streams
sessions: each event shows its session's own end, read from the stored value; on a windowed
table the range's bounds are those of the windows' keys."""

from __future__ import annotations

import orjson

from sparkiq.core.serde import window_store_key
from sparkiq.core.tables import TableDef, TableKind
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


def test_a_windowed_range_takes_every_window_of_its_keys_and_no_other_key() -> None:
    clicks = TableDef("clicks", "clicks", 1, kind=TableKind.WINDOWED, window_size_ms=60_000)

    def watched(lo: bytes | None, hi: bytes | None, prefix: bytes | None) -> WatchedRange:
        return WatchedRange(clicks, (0,), lo, hi, prefix, "/v1/tables/clicks/changes", {})

    def taken(w: WatchedRange) -> set[str]:
        keys = ("alic", "alice", "alicex", "bob")
        return {
            k
            for k in keys
            for start in (-60_000, 0, 2**40)
            if w.accepts(window_store_key(k.encode(), start))
        }

    # `to=alice` ends at the key alice: all its windows (their store keys sort after it).
    assert taken(watched(b"alice", b"alice", None)) == {"alice"}
    assert taken(watched(b"alic", b"alice", None)) == {"alic", "alice"}
    assert taken(watched(None, b"alicex", None)) == {"alic", "alice", "alicex"}
    assert taken(watched(None, None, b"alice")) == {"alice", "alicex"}
    assert taken(watched(b"b", None, None)) == {"bob"}
