"""The windows of a range of keys in (key, window start) order (sparkiq.http.reads.windowwalk),
against a plain-Python oracle, for keys that begin other keys most of all."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sparkiq.core.queries import Order
from sparkiq.core.serde import split_window_store_key, window_store_key
from sparkiq.http.reads.windowwalk import KeySpan, walk_windows
from sparkiq.http.staticview import DictStore

Window = tuple[bytes, int]


def store_of(windows: set[Window]) -> DictStore:
    return DictStore((window_store_key(key, start), b"%d" % start) for key, start in windows)


def oracle(windows: set[Window], span: KeySpan, lo: int, hi: int, order: Order) -> list[Window]:
    kept = [(key, start) for key, start in windows if span.holds(key) and lo <= start <= hi]
    return sorted(kept, reverse=order is Order.DESC)


def read_all(
    store: DictStore, span: KeySpan, order: Order, page: int, budget: int
) -> tuple[list[Window], int]:
    """Every window the walk gives, page after page; and how many pages."""
    got: list[Window] = []
    cursor: bytes | None = None
    pages = 0
    while True:
        rows, cursor = walk_windows(store, span, order, cursor, page, budget)
        assert len(rows) <= page
        got.extend(split_window_store_key(k) for k, _ in rows)
        pages += 1
        assert pages < 10_000, "the walk does not progress"
        if cursor is None:
            return got, pages


def span_of(key_lo: bytes | None, key_hi: bytes | None, prefix: bytes | None, lo: int, hi: int):
    return KeySpan(key_lo, key_hi, prefix, window_store_key(b"", lo), window_store_key(b"", hi))


def test_keys_that_begin_others_come_first_in_either_order() -> None:
    minute = 60_000
    names = [b"customer-1", b"customer-10", b"customer-19", b"customer-2", b"c", b""]
    windows = {(name, start * minute) for name in names for start in (0, 1, 2)}
    store = store_of(windows)
    everything = span_of(None, None, None, -(2**63), 2**63 - 1)
    for order in Order:
        got, _ = read_all(store, everything, order, page=4, budget=10_000)
        assert got == oracle(windows, everything, -(2**63), 2**63 - 1, order)
    assert got[0] == (b"customer-2", 2 * minute)  # descending: the last key's newest window
    bounded = span_of(b"customer-1", b"customer-19", None, minute, 2 * minute)
    got, _ = read_all(store, bounded, Order.ASC, page=100, budget=10_000)
    assert [key for key, _ in got[::2]] == [b"customer-1", b"customer-10", b"customer-19"]


keys = st.lists(
    st.binary(min_size=0, max_size=4).map(lambda b: bytes(c % 4 + 0x7E for c in b)),
    min_size=1,
    max_size=12,
    unique=True,
)


@settings(max_examples=300, deadline=None)
@given(
    names=keys,
    starts=st.lists(st.integers(-3, 3), min_size=1, max_size=4),
    data=st.data(),
    order=st.sampled_from(Order),
    page=st.integers(1, 5),
    budget=st.integers(1, 12),
)
def test_a_walk_paged_within_any_budget_is_the_oracle(
    names: list[bytes],
    starts: list[int],
    data: st.DataObject,
    order: Order,
    page: int,
    budget: int,
) -> None:
    # Bytes around 0x7f-0x81 against starts around 0 (whose first stored byte is 0x7f or
    # 0x80): keys that begin others sort on both sides of their windows.
    windows = {
        (name, start) for name in names for start in data.draw(st.sets(st.sampled_from(starts)))
    }
    bound = st.one_of(st.none(), st.sampled_from(names))
    key_lo, key_hi = data.draw(bound), data.draw(bound)
    prefix = data.draw(st.one_of(st.none(), st.sampled_from(names).map(lambda n: n[:1])))
    lo, hi = sorted((data.draw(st.integers(-4, 4)), data.draw(st.integers(-4, 4))))
    span = span_of(key_lo, key_hi, prefix, lo, hi)
    got, _ = read_all(store_of(windows), span, order, page, budget)
    assert got == oracle(windows, span, lo, hi, order)
