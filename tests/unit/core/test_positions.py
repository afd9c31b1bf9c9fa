from __future__ import annotations

import pytest

from sparkiq.core import positions
from sparkiq.core.positions import BadPositions


def test_round_trip_in_partition_order_without_unknown() -> None:
    text = positions.encode({3: 877, 0: 1200, 5: None})
    assert text == "0-1200.3-877"
    assert positions.decode(text) == {0: 1200, 3: 877}
    assert positions.decode("") == {}
    assert positions.one(2, 40) == "2-40"


@pytest.mark.parametrize(
    "text",
    ["x", "1", "1-", "-1", "1-2-3", "1-2.1-3", "a-1", "1-²", "1-+2", "1-2,3-4", "1-" + "9" * 20],
)
def test_malformed(text: str) -> None:
    with pytest.raises(BadPositions):
        positions.decode(text)


def test_partition_past_the_table() -> None:
    assert positions.decode("2-5", partitions=3) == {2: 5}
    with pytest.raises(BadPositions, match="past the table's 3"):
        positions.decode("3-5", partitions=3)


def test_merge_keeps_the_newer_per_partition() -> None:
    mine = {0: 10, 1: 5}
    assert positions.merge(mine, {1: 7, 2: 1, 0: 3}) == {0: 10, 1: 7, 2: 1}


def test_covers_only_the_partitions_read() -> None:
    want = {0: 10, 1: 5}
    assert positions.covers({0: 10}, want, [0])
    assert not positions.covers({0: 9}, want, [0])
    assert not positions.covers({0: 10}, want, [0, 1])
    assert positions.covers({}, want, [2])


def test_token_book_keeps_the_newest_per_table_and_partition() -> None:
    book = positions.TokenBook()
    assert book.token("users") == ""
    book.observe("users", "0-10.1-5")
    book.observe("users", "1-3.2-7")
    book.observe("users", "")
    book.observe("orders", "0-1")
    assert book.token("users") == "0-10.1-5.2-7"
    assert book.token("users", [1, 9]) == "1-5"
    assert book.token("users", [9]) == ""
    with pytest.raises(BadPositions):
        book.observe("users", "nope")
