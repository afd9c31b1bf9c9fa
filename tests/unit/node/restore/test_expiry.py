"""Window retention against a real store: where a sweep takes the newest window start from
(the records a replica reads, the store on its first pass), what it keeps and removes, when
it looks again, for keys of every layout (a pass seeks past the windows it keeps where the
key format allows), in slices of bounded time, and what it leaves in RocksDB."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkiq.core.errors import FormatError
from sparkiq.core.serde import window_store_key, window_wire_key
from sparkiq.core.tables import Format, TableDef, TableKind
from sparkiq.node.restore.expiry import (
    AGAIN_S,
    FLUSH_AT_DELETES,
    FULL_EVERY,
    LOOK_EVERY_S,
    STEP_OF_RETENTION,
    WindowExpiry,
    interval_s,
)
from sparkiq.node.restore.replica import Replica
from sparkiq.node.stores.partitionstore import PartitionStore
from sparkiq.node.stores.registry import StoreRegistry

MINUTE = 60_000
TABLE = TableDef(
    "sales",
    "sales-changelog",
    2,
    key_format=Format.STRING,
    kind=TableKind.WINDOWED,
    window_size_ms=MINUTE,
    retention_ms=2 * MINUTE,
)


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[StoreRegistry]:
    reg = StoreRegistry(tmp_path)
    yield reg
    reg.close_all()


def replica_of(table: TableDef, store: PartitionStore) -> Replica:
    return Replica((table.topic, store.partition), table, store)


def newest_start(replica: Replica) -> int | None:
    """The newest window start `replica` noted from the records it read."""
    assert replica.newest_start is not None, "a windowed table with a retention notes it"
    return replica.newest_start.ms


def fill(store: PartitionStore, keys: list[str], minutes: range) -> None:
    """Windows the store holds already (written before the node started): no record of them
    is read, so only a sweep of the store learns their newest start."""
    records: list[tuple[bytes, bytes | None]] = [
        (window_store_key(k.encode(), m * MINUTE), b"{}") for k in keys for m in minutes
    ]
    store.apply(records, (store.next_offset or 0) + len(records))


def read(replica: Replica, keys: list[str], minutes: list[float]) -> None:
    """Changelog records the restorer reads for `replica`: their store keys come from its key
    function, which notes their window starts."""
    assert replica.key_fn is not None
    records: list[tuple[bytes, bytes | None]] = [
        (replica.key_fn(window_wire_key(k.encode(), int(m * MINUTE))), b"{}")
        for k in keys
        for m in minutes
    ]
    store = replica.store
    store.apply(records, (store.next_offset or 0) + len(records))


def starts(store: PartitionStore) -> dict[str, list[float]]:
    """Each key's window starts, in minutes."""
    out: dict[str, list[float]] = {}
    for key, _ in store.scan(limit=1_000_000):
        out.setdefault(key[:-8].decode(), []).append(
            (int.from_bytes(key[-8:], "big") - (1 << 63)) / MINUTE
        )
    return out


def sweep_until_idle(expiry: WindowExpiry, held: list[Replica], now: float) -> float:
    """Step until no pass is due at `now`; returns `now`."""
    for _ in range(10_000):
        if expiry.step(held, now=now) == 0:
            return now
    raise AssertionError("the sweep never finished")


def test_the_first_pass_reads_the_newest_start_from_the_store(registry: StoreRegistry) -> None:
    store = registry.open(TABLE, 0)
    keys = [f"store-{i:03d}" for i in range(40)]
    fill(store, keys, range(0, 10))  # windows starting at minutes 0..9 for every key
    expiry = WindowExpiry(chunk=7)  # small chunks: passes span many steps
    replica = replica_of(TABLE, store)
    assert newest_start(replica) is None
    sweep_until_idle(expiry, [replica], now=0.0)
    # Newest window: minute 9 (ends at 10); kept: those ending at 8 or later (start >= 7).
    assert starts(store) == {k: [7, 8, 9] for k in keys}
    assert expiry.removed == 40 * 7


def test_later_passes_take_the_newest_start_from_the_records_read(
    registry: StoreRegistry,
) -> None:
    store = registry.open(TABLE, 0)
    keys = [f"store-{i:03d}" for i in range(40)]
    fill(store, keys, range(0, 10))
    expiry = WindowExpiry(chunk=7)
    replica = replica_of(TABLE, store)
    sweep_until_idle(expiry, [replica], now=0.0)
    read(replica, keys[:1], [12])
    assert newest_start(replica) == 12 * MINUTE
    # A window no record brought (written behind the restorer's back): a pass after the
    # first does not look for the newest start in the store, so it does not move the cutoff.
    fill(store, ["zz"], range(30, 31))
    # The cutoff moved by 3 minutes, more than a quarter of the retention: a pass is due
    # AGAIN_S after the last one.
    assert expiry.step([replica], now=AGAIN_S) > 0
    sweep_until_idle(expiry, [replica], now=AGAIN_S)
    # Every other key's windows ended too early; 12 - 2 minutes, not 30 - 2, is the cutoff.
    assert starts(store) == {keys[0]: [12], "zz": [30]}
    assert expiry.removed == 40 * 7 + 40 * 3
    sweep_until_idle(expiry, [replica], now=interval_s(TABLE))  # and stays so
    assert starts(store) == {keys[0]: [12], "zz": [30]}


def test_a_pass_waits_until_the_cutoff_has_moved_enough(registry: StoreRegistry) -> None:
    store = registry.open(TABLE, 0)
    replica = replica_of(TABLE, store)
    read(replica, ["a", "b"], list(range(0, 10)))
    expiry = WindowExpiry(step_s=1.0)  # a step is a whole pass here
    # The newest start is known from the records: the first pass removes at once.
    assert expiry.step([replica], now=0.0) > 0
    assert not expiry.sweeping
    assert starts(store) == {"a": [7, 8, 9], "b": [7, 8, 9]}
    sweep_until_idle(expiry, [replica], now=0.0)
    step = 2 / STEP_OF_RETENTION  # minutes: TABLE's retention over the step, half a minute
    assert step == 0.5
    read(replica, ["a"], [9 + step / 2])  # the cutoff moves by less than the step
    for now in (AGAIN_S, interval_s(TABLE) - 0.1):
        assert expiry.step([replica], now=now) == 0, f"no pass is due at {now} s"
    read(replica, ["a"], [9 + step])  # ... and now by the step
    assert expiry.step([replica], now=AGAIN_S / 2) == 0, "a pass came within AGAIN_S"
    assert expiry.step([replica], now=AGAIN_S) > 0
    sweep_until_idle(expiry, [replica], now=AGAIN_S)
    assert starts(store) == {"a": [8, 9, 9.25, 9.5], "b": [8, 9]}


def test_a_pass_comes_after_the_interval_all_the_same_and_removes_late_windows(
    registry: StoreRegistry,
) -> None:
    store = registry.open(TABLE, 0)
    replica = replica_of(TABLE, store)
    read(replica, ["a", "b"], list(range(0, 10)))
    expiry = WindowExpiry()
    sweep_until_idle(expiry, [replica], now=0.0)
    read(replica, ["a"], [2])  # a late record of a window long expired: the cutoff stays
    assert newest_start(replica) == 9 * MINUTE
    for now in (AGAIN_S, interval_s(TABLE) - 0.1):
        assert expiry.step([replica], now=now) == 0, f"no pass is due at {now} s"
    assert starts(store)["a"] == [2, 7, 8, 9]
    assert expiry.step([replica], now=interval_s(TABLE)) > 0
    sweep_until_idle(expiry, [replica], now=interval_s(TABLE))
    assert starts(store) == {"a": [7, 8, 9], "b": [7, 8, 9]}


def test_held_replicas_are_looked_at_a_share_per_step_each_within_look_every_s(
    registry: StoreRegistry,
) -> None:
    # A caught-up restorer steps once per record or few, and holds thousands of replicas: a
    # step looks at its time's share of them, not at every one.
    table = dataclasses.replace(TABLE, partitions=20)
    held = [replica_of(table, registry.open(table, p)) for p in range(20)]
    for replica in held:
        read(replica, ["a"], list(range(0, 10)))
    expiry = WindowExpiry(step_s=1.0)
    expiry.hold(held)
    while expiry.step(now=0.0):  # every first pass, the first step looking at all
        pass
    for replica in held:
        read(replica, ["a"], [2])  # late: expired by the pass after the interval
    due = interval_s(table)
    assert expiry.step(now=due - 0.05) == 0, "no pass is due yet"

    def late() -> int:
        return sum(2 in starts(r.store)["a"] for r in held)

    assert expiry.step(now=due + 0.1) > 0
    assert 20 - 5 <= late() < 20, "a step 0.15 s on looks at about 3 of 20 replicas"
    now = due + 0.1
    while now < due + LOOK_EVERY_S:
        now += 0.1
        expiry.step(now=now)
    assert late() == 0, f"every replica looked at within {LOOK_EVERY_S} s"


def test_a_replica_notes_the_newest_start_only_of_records_it_stores(
    registry: StoreRegistry,
) -> None:
    table = dataclasses.replace(TABLE, key_format=Format.LONG)
    replica = replica_of(table, registry.open(table, 0))
    assert replica.key_fn is not None
    key = (7).to_bytes(8, "big")
    for m in (5, 3):
        wire = window_wire_key(key, m * MINUTE)
        assert replica.key_fn(wire) == window_store_key(b"\x80" + key[1:], m * MINUTE)
    assert newest_start(replica) == 5 * MINUTE
    # A key of the wrong length is skipped by the restorer: its start is not the newest.
    with pytest.raises(FormatError):
        replica.key_fn(window_wire_key(b"\x00" * 3, 9 * MINUTE))
    assert newest_start(replica) == 5 * MINUTE


def test_only_windowed_tables_with_a_retention_note_the_newest_start(
    registry: StoreRegistry,
) -> None:
    forever = dataclasses.replace(TABLE, name="forever", topic="t2", retention_ms=None)
    plain = TableDef("plain", "t3", 1)
    for table in (forever, plain):
        assert replica_of(table, registry.open(table, 0)).newest_start is None


def test_tables_without_a_retention_are_left_alone(registry: StoreRegistry) -> None:
    forever = TableDef(
        "forever", "t2", 1, kind=TableKind.WINDOWED, window_size_ms=MINUTE, retention_ms=None
    )
    store = registry.open(forever, 0)
    fill(store, ["a"], range(0, 100))
    expiry = WindowExpiry()
    assert expiry.step([replica_of(forever, store)], now=0.0) == 0
    assert len(starts(store)["a"]) == 100


def test_a_closed_store_ends_its_sweep_and_a_reopened_one_starts_over(
    registry: StoreRegistry,
) -> None:
    store = registry.open(TABLE, 1)
    fill(store, ["a", "b"], range(0, 20))
    expiry = WindowExpiry(chunk=5)
    replica = replica_of(TABLE, store)
    expiry.step([replica], now=0.0)
    registry.close(TABLE.name, 1)
    expiry.step([replica], now=0.0)  # the store is closed: no error, the sweep is dropped
    reopened = registry.open(TABLE, 1)
    replica.replace_store(reopened, rebuilt=False)
    sweep_until_idle(expiry, [replica], now=0.0)
    assert starts(reopened) == {"a": [17, 18, 19], "b": [17, 18, 19]}


def test_the_interval_is_a_tenth_of_the_retention_within_bounds() -> None:
    def with_retention(ms: int) -> TableDef:
        return TableDef("w", "t", 1, kind=TableKind.WINDOWED, window_size_ms=1, retention_ms=ms)

    assert interval_s(with_retention(2 * MINUTE)) == 12.0
    assert interval_s(with_retention(1_000)) == 1.0
    assert interval_s(with_retention(24 * 60 * MINUTE)) == 60.0


# -- keys of every layout ----------------------------------------------------------------------

# Text keys where one is a prefix of another, with characters of one to three UTF-8 bytes;
# byte keys with the bytes around the window start's sign byte (0x80), which do let one
# key's windows sort between another's.
_TEXT = st.text(alphabet="aé€", min_size=1, max_size=3).map(str.encode)
_LAYOUTS = {
    Format.STRING: _TEXT,
    Format.JSON: _TEXT.map(lambda k: b'"' + k),
    Format.LONG: st.binary(min_size=8, max_size=8),
    Format.BYTES: st.binary(max_size=3).map(lambda k: bytes(b % 4 + 0x7E for b in k)),
}


@settings(max_examples=40, deadline=None)
@given(
    fmt=st.sampled_from(sorted(_LAYOUTS)),
    data=st.data(),
    chunk=st.integers(min_value=1, max_value=9),
    retention=st.integers(min_value=1, max_value=5),
)
def test_a_sweep_keeps_exactly_the_windows_within_the_retention(
    tmp_path_factory: pytest.TempPathFactory,
    fmt: Format,
    data: st.DataObject,
    chunk: int,
    retention: int,
) -> None:
    keys = data.draw(st.sets(_LAYOUTS[fmt], min_size=1, max_size=8), label="keys")
    # Window starts in minutes, some before 1970 (their store keys sort otherwise).
    windows = data.draw(
        st.sets(
            st.tuples(st.sampled_from(sorted(keys)), st.integers(min_value=-3, max_value=12)),
            min_size=1,
            max_size=60,
        ),
        label="windows",
    )
    table = dataclasses.replace(TABLE, key_format=fmt, retention_ms=retention * MINUTE)
    reg = StoreRegistry(tmp_path_factory.mktemp("layouts"))
    try:
        store = reg.open(table, 0)
        records: list[tuple[bytes, bytes | None]] = [
            (window_store_key(k, m * MINUTE), b"{}") for k, m in windows
        ]
        store.apply(records, len(records))
        sweep_until_idle(WindowExpiry(chunk=chunk), [replica_of(table, store)], now=0.0)
        newest = max(m for _, m in windows)
        kept = [window_store_key(k, m * MINUTE) for k, m in windows if m >= newest - retention]
        assert [k for k, _ in store.scan(limit=1_000)] == sorted(kept)
    finally:
        reg.close_all()


def test_a_text_key_that_is_not_utf8_expires_in_the_pass_that_looks_at_every_window(
    registry: StoreRegistry,
) -> None:
    # b"a\x80" is no UTF-8 text: its windows sort among the kept windows of b"a", which a
    # pass seeks past (the first pass takes the last of them for the newest of b"a"). A pass
    # that looks at every window finds the newest start; the next such pass removes them.
    store = registry.open(TABLE, 0)
    fill(store, ["a"], range(0, 10))
    odd = [(window_store_key(b"a\x80", m * MINUTE), b"{}") for m in range(0, 3)]
    store.apply(odd, (store.next_offset or 0) + len(odd))
    expiry = WindowExpiry()
    held = [replica_of(TABLE, store)]
    for n in range(2 * FULL_EVERY):
        sweep_until_idle(expiry, held, now=n * 100.0)
    assert [k for k, _ in store.scan(limit=100)] == [
        window_store_key(b"a", m * MINUTE) for m in (7, 8, 9)
    ]


# -- slices and what a pass leaves in RocksDB ----------------------------------------------------


def test_a_step_stops_after_its_time_and_the_pass_goes_on_at_the_next(
    registry: StoreRegistry,
) -> None:
    store = registry.open(TABLE, 0)
    keys = [f"store-{i:03d}" for i in range(200)]
    fill(store, keys, range(0, 10))
    expiry = WindowExpiry(chunk=10_000, step_s=0.0)  # a step ends with its first slice
    held = [replica_of(TABLE, store)]
    assert not expiry.sweeping
    looked = expiry.step(held, now=0.0)
    assert 0 < looked < len(keys), "a step without time left must not finish the pass"
    assert expiry.sweeping  # the restorer comes back soon
    steps = 1
    while expiry.step(held, now=0.0):
        steps += 1
    assert steps > 2  # two passes (the first finds the newest start), each over many steps
    assert not expiry.sweeping
    assert starts(store) == {k: [7, 8, 9] for k in keys}


def test_a_step_keeps_to_its_time_and_sleeps_between_its_slices(
    registry: StoreRegistry,
) -> None:
    store = registry.open(TABLE, 0)
    fill(store, [f"store-{i:05d}" for i in range(5_000)], range(0, 10))
    expiry = WindowExpiry(chunk=10**6, slice_s=0.000_2, yield_s=0.000_2, step_s=0.01)
    held = [replica_of(TABLE, store)]
    expiry.step(held, now=0.0)  # the first pass: it reads only
    walls, cpus = [], []
    for _ in range(10):
        wall, cpu = time.perf_counter(), time.thread_time()
        assert expiry.step(held, now=0.0), "expected a pass under way"
        walls.append(time.perf_counter() - wall)
        cpus.append(time.thread_time() - cpu)
    # The pass (thousands of keys) takes many steps of about 10 ms, half of it asleep (a
    # busy machine may stretch the wall time, never the share of CPU).
    assert expiry.sweeping
    assert statistics.median(walls) < 0.03
    assert sum(cpus) < 0.75 * sum(walls)


def test_a_pass_that_removed_many_windows_flushes_its_deletes(registry: StoreRegistry) -> None:
    store = registry.open(TABLE, 0)
    keys = [f"store-{i:04d}" for i in range(FLUSH_AT_DELETES // 5)]
    fill(store, keys, range(0, 10))  # 7 of each key's 10 windows expire
    assert not list(store.path.glob("*.sst"))
    sweep_until_idle(WindowExpiry(), [replica_of(TABLE, store)], now=0.0)
    deadline = time.monotonic() + 10
    while not list(store.path.glob("*.sst")) and time.monotonic() < deadline:
        time.sleep(0.01)  # the flush runs in RocksDB's background
    assert list(store.path.glob("*.sst")), "expected the memtable of deletes to be flushed"
    assert starts(store) == {k: [7, 8, 9] for k in keys}
