"""A windows query's parameters (`sparkiq.http.reads.windows.parse`); the answers themselves are
checked through the API in tests/unit/http/test_ranges.py."""

from __future__ import annotations

import pytest

from sparkiq.core.queries import Failure, FailureReason, Order
from sparkiq.core.serde import window_store_key
from sparkiq.core.tables import TableDef, TableKind
from sparkiq.core.timespec import now_ms
from sparkiq.http.messages.params import encode_cursor
from sparkiq.http.reads import windows
from sparkiq.http.reads.windows import WindowsQuery

CLICKS = TableDef("clicks", "clicks-changelog", 2, kind=TableKind.WINDOWED, window_size_ms=60_000)
USERS = TableDef("users", "users-changelog", 2)
LONGEST = 2**63 - 1


def test_a_windows_query_reads_its_bounds_key_limit_order_and_cursor() -> None:
    assert windows.parse(CLICKS, "u1", {}, 100, 50) == WindowsQuery(b"u1", -(2**63), LONGEST, 50)
    asked = {"from": "5", "to": "5", "limit": "3", "order": "desc"}
    assert windows.parse(CLICKS, "u1", asked, 100, 50) == WindowsQuery(b"u1", 5, 5, 3, Order.DESC)
    cursor = window_store_key(b"u1", 60_000)
    asked = {"cursor": encode_cursor(cursor)}
    query = windows.parse(CLICKS, "u1", asked, 100, 50)
    assert isinstance(query, WindowsQuery)
    assert query.after == cursor


def test_times_may_be_iso_or_relative_to_now() -> None:
    query = windows.parse(CLICKS, "u1", {"from": "2026-01-01T00:00:00Z", "to": "now"}, 100, 50)
    assert isinstance(query, WindowsQuery)
    assert query.lo == 1_767_225_600_000
    assert abs(query.hi - now_ms()) < 5_000
    query = windows.parse(CLICKS, "u1", {"from": "-15m"}, 100, 50)
    assert isinstance(query, WindowsQuery)
    assert abs(query.lo - (now_ms() - 15 * 60_000)) < 5_000


@pytest.mark.parametrize(
    ("table", "key", "params", "reason"),
    [
        (USERS, "u1", {}, FailureReason.NOT_WINDOWED),
        (CLICKS, "u1", {"from": "7", "to": "6"}, FailureReason.BAD_REQUEST),
        (CLICKS, "u1", {"from": "x"}, FailureReason.BAD_REQUEST),
        (CLICKS, "u1", {"to": str(2**63)}, FailureReason.BAD_REQUEST),
        (CLICKS, "u1", {"limit": "51"}, FailureReason.BAD_REQUEST),
        (CLICKS, "u1", {"order": "newest"}, FailureReason.BAD_REQUEST),
        (CLICKS, "u1", {"cursor": "%%"}, FailureReason.BAD_REQUEST),
        # Another key's window is not a cursor of this one's.
        (CLICKS, "u1", {"cursor": encode_cursor(window_store_key(b"u2", 0))}, "bad_request"),
        (CLICKS, "u1", {"cursor": encode_cursor(b"u1")}, FailureReason.BAD_REQUEST),
        (CLICKS, "u" * 101, {}, FailureReason.TOO_LARGE),
    ],
)
def test_a_bad_windows_query_is_refused_with_its_reason(
    table: TableDef, key: str, params: dict[str, str], reason: FailureReason
) -> None:
    found = windows.parse(table, key, params, 100, 50)
    assert isinstance(found, Failure)
    assert found.reason == reason
