"""Pages read within a budget and merged across partitions (sparkiq.http.reads.scanning)."""

from __future__ import annotations

import random

import pytest

from sparkiq.core.queries import Order
from sparkiq.http.reads.scanning import PageMerge, Scan, scan_partition
from sparkiq.http.staticview import DictStore


def _store(keys: list[bytes]) -> DictStore:
    return DictStore((k, b"v" + k) for k in keys)


def _even(key: bytes) -> bool:
    return key[-1] % 2 == 0


def test_a_scan_that_keeps_all_rows_reads_one_store_page() -> None:
    store = _store([bytes([i]) for i in range(10)])
    rows, reached = scan_partition(store, Scan(None, None, None, None), 4)
    assert [k for k, _ in rows] == [bytes([i]) for i in range(4)]
    assert reached == b"\x03"
    assert store.reads == 1
    rows, reached = scan_partition(store, Scan(None, None, None, b"\x05", Order.DESC), 10)
    assert [k for k, _ in rows] == [bytes([i]) for i in (4, 3, 2, 1, 0)]
    assert reached is None  # the end of the range


def test_a_filtered_scan_stops_at_its_budget_and_says_where() -> None:
    store = _store([bytes([i]) for i in range(100)])
    scan = Scan(None, None, None, None, keep=lambda k: k[-1] >= 90)
    rows, reached = scan_partition(store, scan, 5, budget=50)
    assert rows == []
    assert reached == bytes([49])  # examined 0..49: resume after it
    resumed = Scan(None, None, None, reached, keep=scan.keep)
    rows, reached = scan_partition(store, resumed, 5, budget=50)
    assert [k[-1] for k, _ in rows] == [90, 91, 92, 93, 94]
    assert reached == bytes([94])


@pytest.mark.parametrize("order", list(Order))
def test_merged_pages_with_budgets_give_every_kept_row_once_in_order(order: Order) -> None:
    rng = random.Random(7)
    keys = sorted({bytes(rng.randrange(256) for _ in range(3)) for _ in range(600)})
    partitions = [_store(keys[p::3]) for p in range(3)]
    expected = sorted((k for k in keys if _even(k)), reverse=order is Order.DESC)
    seen: list[bytes] = []
    cursor: bytes | None = None
    pages = 0
    while True:
        merge: PageMerge[bytes] = PageMerge(order)
        for store in partitions:
            scan = Scan(None, None, None, cursor, order, _even)
            merge.add(*scan_partition(store, scan, 11, budget=17))
        page, cursor = merge.page(10)
        assert len(page) <= 10
        seen.extend(k for k, _ in page)
        pages += 1
        if cursor is None:
            break
    assert seen == expected
    assert pages > len(expected) // 10  # some pages were cut short by the budget


def test_a_merge_without_stops_is_the_first_rows_in_order() -> None:
    merge: PageMerge[str] = PageMerge(Order.ASC)
    merge.add([(b"b", "b"), (b"d", "d")], None)
    merge.add([(b"a", "a"), (b"c", "c")], None)
    assert merge.page(3) == ([(b"a", "a"), (b"b", "b"), (b"c", "c")], b"c")
    assert merge.page(4) == ([(b"a", "a"), (b"b", "b"), (b"c", "c"), (b"d", "d")], None)
