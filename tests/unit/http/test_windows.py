"""A windows query's parameters (`sparkiq.http.windows.parse`); the answers themselves are
checked through the API in tests/unit/http/test_api.py."""

from __future__ import annotations

import pytest

from sparkiq.core.queries import Failure, FailureReason
from sparkiq.core.tables import TableDef, TableKind
from sparkiq.http import windows

CLICKS = TableDef("clicks", "clicks-changelog", 2, kind=TableKind.WINDOWED, window_size_ms=60_000)
USERS = TableDef("users", "users-changelog", 2)


def test_a_windows_query_reads_its_bounds_and_key() -> None:
    assert windows.parse(CLICKS, "u1", {}, 100) == (b"u1", -(2**63), 2**63 - 1)
    assert windows.parse(CLICKS, "u1", {"from": "5", "to": "5"}, 100) == (b"u1", 5, 5)


@pytest.mark.parametrize(
    ("table", "key", "params", "reason"),
    [
        (USERS, "u1", {}, FailureReason.NOT_WINDOWED),
        (CLICKS, "u1", {"from": "7", "to": "6"}, FailureReason.BAD_REQUEST),
        (CLICKS, "u1", {"from": "x"}, FailureReason.BAD_REQUEST),
        (CLICKS, "u1", {"to": str(2**63)}, FailureReason.BAD_REQUEST),
        (CLICKS, "u" * 101, {}, FailureReason.TOO_LARGE),
    ],
)
def test_a_bad_windows_query_is_refused_with_its_reason(
    table: TableDef, key: str, params: dict[str, str], reason: FailureReason
) -> None:
    found = windows.parse(table, key, params, 100)
    assert isinstance(found, Failure)
    assert found.reason is reason
