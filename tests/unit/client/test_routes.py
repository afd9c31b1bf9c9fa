"""The client's map of tables and owners, from `GET /v1/metadata`: a table of Kafka Streams
sessions (no window size) is kept, and its keys are placed by the key alone."""

from __future__ import annotations

from sparkiq.client.routes import parse_routes
from sparkiq.core.tables import WindowLayout
from tests.support.kstreamstables import session_table


def test_a_session_table_is_routed_like_any_windowed_table() -> None:
    sessions = session_table()
    meta = {
        "tables": [sessions.summary()],
        "partitions": [{"table": "sessions", "partition": 2, "active": "http://a"}],
        "nodes": [{"url": "http://a"}],
    }
    routes = parse_routes(meta, ["http://b"])
    got = routes.tables["sessions"]
    assert got.window_layout is WindowLayout.KSTREAMS_SESSION
    assert got.window_size_ms is None
    assert got.partition_of(b"alice") == sessions.partition_of(b"alice")
    assert routes.active[("sessions", 2)] == "http://a"
