"""The client's paged-read queries (sparkiq.client.pages)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sparkiq.client.pages import page_query, paged, time_text
from sparkiq.core.errors import ClientError

NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def test_times_become_epoch_ms_once() -> None:
    assert time_text(5, NOW) == "5"
    assert time_text("-15m", NOW) == str(NOW - 900_000)
    assert time_text("2026-01-01T00:00:00Z", NOW) == str(NOW)
    assert time_text(datetime(2026, 1, 1, tzinfo=UTC), NOW) == str(NOW)
    assert time_text(datetime(2026, 1, 1), NOW) == str(NOW)  # naive: UTC
    with pytest.raises(ClientError, match="does not parse"):
        time_text("soon", NOW)


def test_a_query_names_only_what_was_given() -> None:
    assert page_query(None, None, "desc", None) == {"order": "desc"}
    query = page_query(0, 10, "asc", 50, key_from="a", key_to=None, prefix=None)
    assert query == {"order": "asc", "limit": "50", "from": "0", "to": "10", "key_from": "a"}
    with pytest.raises(ClientError, match="order"):
        page_query(None, None, "newest", None)


def test_pages_are_followed_by_their_cursors() -> None:
    asked: list[dict[str, str]] = []
    book = {None: ([1, 2], "c1"), "c1": ([3], "c2"), "c2": ([], None)}

    def fetch(query: dict[str, str]) -> dict[str, object]:
        asked.append(dict(query))
        items, cursor = book[query.get("cursor")]  # type: ignore[index]
        return {"items": items, "next_cursor": cursor}

    assert list(paged(fetch, {"limit": "2"})) == [1, 2, 3]
    assert asked == [{"limit": "2"}, {"limit": "2", "cursor": "c1"}, {"limit": "2", "cursor": "c2"}]
