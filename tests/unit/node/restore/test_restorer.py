from __future__ import annotations

import random
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition as CTopicPartition

from sparkiq.core.partitioner import Partitioner, crc32_partition, partition_for
from sparkiq.core.serde import key_codec, split_window_store_key, window_wire_key
from sparkiq.core.tables import Format, TableDef, TableKind
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.offsets import probe_consumer
from sparkiq.node.restore import PartitionStatus, ReplicaState, Restorer
from tests.support.restore import (
    Oracle,
    Tables,
    all_in,
    contents,
    produce,
    random_records,
    wait_for,
)

pytest_plugins = ["tests.support.restore"]


@pytest.fixture(scope="module")
def bootstrap(any_bootstrap: str) -> str:
    """This module runs on Apache Kafka and again on the dev broker (compatibility)."""
    return any_bootstrap


def test_restore_equals_the_oracle(
    bootstrap: str,
    unique_name: Callable[[str], str],
    tables: Tables,
    make_restorer: Callable[..., Restorer],
) -> None:
    topic = unique_name("restore")
    create_topic(bootstrap, topic, 3)
    table = tables.add(TableDef(name=topic, topic=topic, partitions=3, value_format=Format.STRING))
    oracle: Oracle = {}
    records = random_records(3, 6000, 700, seed=1)
    produce(bootstrap, topic, records, oracle, flush_every=1000)
    changes = threading.Semaphore(0)

    restorer = make_restorer(on_change=changes.release)
    tps = [(topic, p) for p in range(3)]
    restorer.assign(set(tps), set())
    # Right after assign the partitions are known and restoring, never ACTIVE before the
    # end is measured.
    assert {st.state for st in restorer.statuses().values()} == {ReplicaState.RESTORING}
    wait_for(lambda: all_in(restorer, tps, ReplicaState.ACTIVE), "all partitions active")

    assert changes.acquire(timeout=1), "on_change was never called"
    for p in range(3):
        assert contents(restorer, (topic, p)) == oracle.get(p, {})
        st = restorer.status((topic, p))
        assert st is not None
        assert st.lag == 0
        assert st.position == st.end == sum(1 for r in records if r[0] == p)
        assert st.table == table.name
    assert restorer.records_applied == len(records)
    # Restored without the write-ahead log, then settled: every store flushes what it wrote.
    stores = [restorer.store(tp) for tp in tps]
    wait_for(lambda: not any(s is None or s.unflushed for s in stores), "restored stores flushed")


def test_active_once_the_under_reported_tail_is_applied(
    bootstrap: str,
    unique_name: Callable[[str], str],
    tables: Tables,
    make_restorer: Callable[..., Restorer],
) -> None:
    topic = unique_name("tail")
    create_topic(bootstrap, topic, 1)
    tables.add(TableDef(name=topic, topic=topic, partitions=1, value_format=Format.STRING))
    # Three flushed batches of ten: the dev broker reports the end as 21, not 30.
    records: list[tuple[int, bytes | None, bytes | None]] = [
        (0, f"k{i:02d}".encode(), f"v{i}".encode()) for i in range(30)
    ]
    produced_from_ms = time.time_ns() // 1_000_000
    produce(bootstrap, topic, records, flush_every=10)
    produced_to_ms = time.time_ns() // 1_000_000
    probe = probe_consumer(bootstrap)
    try:
        _, reported = probe.get_watermark_offsets(CTopicPartition(topic, 0), timeout=10)
    finally:
        probe.close()

    restorer = make_restorer()
    restorer.assign({(topic, 0)}, set())
    wait_for(lambda: all_in(restorer, [(topic, 0)], ReplicaState.ACTIVE), "active")

    st = restorer.status((topic, 0))
    assert st is not None
    # The newest record applied: the last one's Kafka timestamp (its producer's clock).
    assert st.newest_record_ms is not None
    assert produced_from_ms <= st.newest_record_ms <= produced_to_ms
    assert replace(st, newest_record_ms=None) == PartitionStatus(
        (topic, 0), topic, ReplicaState.ACTIVE, 30, 30, 0
    )
    assert len(contents(restorer, (topic, 0))) == 30
    assert reported <= 30  # 21 on the dev broker; 30 on real Kafka


def test_standby_follows_new_records_and_promotion_keeps_the_store(
    bootstrap: str,
    unique_name: Callable[[str], str],
    tables: Tables,
    make_restorer: Callable[..., Restorer],
) -> None:
    topic = unique_name("standby")
    create_topic(bootstrap, topic, 2)
    tables.add(TableDef(name=topic, topic=topic, partitions=2, value_format=Format.STRING))
    oracle: Oracle = {}
    records = random_records(2, 500, 100, seed=2)
    produce(bootstrap, topic, records, oracle)

    restorer = make_restorer()
    tp = (topic, 1)
    restorer.assign(set(), {tp})
    st = restorer.status(tp)
    assert st is not None
    assert st.state is ReplicaState.STANDBY
    wait_for(lambda: contents(restorer, tp) == oracle[1], "standby caught up")

    for round_ in range(3):  # keeps following, batch after batch
        produce(bootstrap, topic, [(1, f"new-{round_}".encode(), b"x")], oracle)
        wait_for(lambda: contents(restorer, tp) == oracle[1], f"new record {round_}")
    wait_for(lambda: (s := restorer.status(tp)) is not None and s.lag == 0, "lag 0")
    status = restorer.status(tp)
    assert status is not None
    assert status.state is ReplicaState.STANDBY
    assert status.position == sum(1 for r in records if r[0] == 1) + 3

    applied = restorer.records_applied
    store = restorer.store(tp)
    restorer.assign({tp}, set())
    wait_for(lambda: all_in(restorer, [tp], ReplicaState.ACTIVE), "promoted standby active")
    assert restorer.store(tp) is store
    assert restorer.records_applied == applied  # nothing replayed

    restorer.assign(set(), {tp})  # and back
    st = restorer.status(tp)
    assert st is not None
    assert st.state is ReplicaState.STANDBY
    assert restorer.store(tp) is store


def test_restart_with_the_same_state_dir_applies_only_the_tail(
    bootstrap: str,
    unique_name: Callable[[str], str],
    tables: Tables,
    make_restorer: Callable[..., Restorer],
    tmp_path: Path,
) -> None:
    topic = unique_name("restart")
    create_topic(bootstrap, topic, 2)
    tables.add(TableDef(name=topic, topic=topic, partitions=2, value_format=Format.STRING))
    oracle: Oracle = {}
    produce(bootstrap, topic, random_records(2, 2000, 300, seed=3), oracle)
    tps = [(topic, 0), (topic, 1)]
    state = tmp_path / "restart-state"

    first = make_restorer(state)
    first.assign(set(tps), set())
    wait_for(lambda: all_in(first, tps, ReplicaState.ACTIVE), "first restore")
    assert first.records_applied == 2000
    first.stop()

    tail = random_records(2, 150, 300, seed=4)
    produce(bootstrap, topic, tail, oracle)
    second = make_restorer(state)
    # Before any assignment the stores on disk are reported with their lag.
    assert second.lags() == {tp: sum(1 for r in tail if r[0] == tp[1]) for tp in tps}
    second.assign(set(tps), set())
    wait_for(lambda: all_in(second, tps, ReplicaState.ACTIVE), "second restore")
    assert second.records_applied == len(tail)
    for tp in tps:
        assert contents(second, tp) == oracle[tp[1]]


def test_reassignment_drops_and_adds_partitions(
    bootstrap: str,
    unique_name: Callable[[str], str],
    tables: Tables,
    make_restorer: Callable[..., Restorer],
) -> None:
    topic = unique_name("moves")
    create_topic(bootstrap, topic, 3)
    tables.add(TableDef(name=topic, topic=topic, partitions=3, value_format=Format.STRING))
    oracle: Oracle = {}
    records = random_records(3, 900, 200, seed=5)
    produce(bootstrap, topic, records, oracle)
    p0, p1, p2 = ((topic, p) for p in range(3))

    restorer = make_restorer()
    restorer.assign({p0}, {p1})
    wait_for(lambda: all_in(restorer, [p0], ReplicaState.ACTIVE), "p0 active")
    wait_for(lambda: contents(restorer, p1) == oracle[1], "p1 followed")

    restorer.assign({p2}, {p1})
    wait_for(lambda: all_in(restorer, [p2], ReplicaState.ACTIVE), "p2 active")
    assert restorer.status(p0) is None
    assert restorer.store(p0) is None
    wait_for(lambda: restorer.registry.get(topic, 0) is None, "p0 store closed")
    assert contents(restorer, p2) == oracle[2]
    # The dropped partition stays on disk with its checkpoint, and is reported as a lag.
    assert restorer.registry.on_disk()[(topic, 0)] == sum(1 for r in records if r[0] == 0)
    assert restorer.lags()[p0] == 0  # offered as a fully caught-up store on rejoin
    # Records for a dropped partition are not applied any more.
    applied = restorer.records_applied
    produce(bootstrap, topic, [(0, b"late", b"x"), (2, b"fresh", b"y")], oracle)
    wait_for(lambda: contents(restorer, p2) == oracle[2], "p2 follows")
    assert restorer.records_applied == applied + 1

    restorer.assign(set(), set())
    wait_for(lambda: restorer.registry.get(topic, 1) is None, "all closed")
    assert restorer.statuses() == {}


def test_null_keys_are_skipped_and_counted(
    bootstrap: str,
    unique_name: Callable[[str], str],
    tables: Tables,
    make_restorer: Callable[..., Restorer],
) -> None:
    topic = unique_name("nullkey")
    create_topic(bootstrap, topic, 1)
    tables.add(TableDef(name=topic, topic=topic, partitions=1, value_format=Format.STRING))
    produce(bootstrap, topic, [(0, b"a", b"1"), (0, None, b"2"), (0, None, b"3"), (0, b"b", b"4")])

    restorer = make_restorer()
    restorer.assign({(topic, 0)}, set())
    wait_for(lambda: all_in(restorer, [(topic, 0)], ReplicaState.ACTIVE), "active")
    assert contents(restorer, (topic, 0)) == {b"a": b"1", b"b": b"4"}
    assert restorer.skipped_records == 2
    assert restorer.records_applied == 2
    st = restorer.status((topic, 0))
    assert st is not None
    assert st.position == 4


def test_long_keys_are_stored_in_numeric_order(
    bootstrap: str,
    unique_name: Callable[[str], str],
    tables: Tables,
    make_restorer: Callable[..., Restorer],
) -> None:
    topic = unique_name("longkeys")
    create_topic(bootstrap, topic, 1)
    table = tables.add(TableDef(name=topic, topic=topic, partitions=1, key_format=Format.LONG))
    numbers = [5, -3, 0, 2**40, -(2**40), 7]
    records: list[tuple[int, bytes | None, bytes | None]] = [
        (0, struct.pack(">q", n), b'{"n": %d}' % n) for n in numbers
    ]
    records.append((0, b"abc", b"{}"))  # not a long: skipped, counted
    produce(bootstrap, topic, records)

    restorer = make_restorer()
    restorer.assign({(topic, 0)}, set())
    wait_for(lambda: all_in(restorer, [(topic, 0)], ReplicaState.ACTIVE), "active")

    store = restorer.store((topic, 0))
    assert store is not None
    codec = key_codec(table)
    rows = store.scan(limit=100)
    assert [codec.render(codec.store_to_wire(k)) for k, _ in rows] == sorted(numbers)
    assert store.get(codec.wire_to_store(struct.pack(">q", -3))) == b'{"n": -3}'
    assert restorer.skipped_records == 1
    assert restorer.records_applied == len(numbers)


def test_windowed_keys_split_into_key_and_window_start(
    bootstrap: str,
    unique_name: Callable[[str], str],
    tables: Tables,
    make_restorer: Callable[..., Restorer],
) -> None:
    topic = unique_name("windows")
    create_topic(bootstrap, topic, 1)
    table = tables.add(
        TableDef(
            name=topic,
            topic=topic,
            partitions=1,
            key_format=Format.LONG,
            kind=TableKind.WINDOWED,
            window_size_ms=60_000,
        )
    )
    windows = [(1, 120_000), (1, 60_000), (-1, 0), (1, -60_000)]
    produce(
        bootstrap,
        topic,
        [
            (0, window_wire_key(struct.pack(">q", k), start), f"{k}@{start}".encode())
            for k, start in windows
        ],
    )

    restorer = make_restorer()
    restorer.assign({(topic, 0)}, set())
    wait_for(lambda: all_in(restorer, [(topic, 0)], ReplicaState.ACTIVE), "active")

    store = restorer.store((topic, 0))
    assert store is not None
    codec = key_codec(table)
    found = []
    for store_key, value in store.scan(limit=100):
        key_store, start = split_window_store_key(store_key)
        found.append((codec.render(codec.store_to_wire(key_store)), start, value))
    # key order first (numeric), then window start order (negative starts first)
    assert found == [
        (-1, 0, b"-1@0"),
        (1, -60_000, b"1@-60000"),
        (1, 60_000, b"1@60000"),
        (1, 120_000, b"1@120000"),
    ]


def test_assign_churn_while_restoring_ends_consistent(
    bootstrap: str,
    unique_name: Callable[[str], str],
    tables: Tables,
    make_restorer: Callable[..., Restorer],
) -> None:
    topic = unique_name("churn")
    create_topic(bootstrap, topic, 3)
    tables.add(TableDef(name=topic, topic=topic, partitions=3, value_format=Format.STRING))
    oracle: Oracle = {}
    produce(bootstrap, topic, random_records(3, 30_000, 2_000, seed=6), oracle)
    tps = [(topic, p) for p in range(3)]
    p0, p1, p2 = tps

    restorer = make_restorer()
    rng = random.Random(7)
    for _ in range(25):  # drop, re-add and flip roles while batches are in flight
        chosen = [tp for tp in tps if rng.random() < 0.7]
        actives = {tp for tp in chosen if rng.random() < 0.5}
        restorer.assign(actives, set(chosen) - actives)
        time.sleep(rng.random() * 0.03)
    restorer.assign({p0, p1}, {p2})

    wait_for(lambda: all_in(restorer, [p0, p1], ReplicaState.ACTIVE), "actives caught up")
    wait_for(lambda: contents(restorer, p2) == oracle[2], "standby caught up")
    for p in range(3):
        assert contents(restorer, tps[p]) == oracle[p]
    assert set(restorer.statuses()) == set(tps)


def test_records_fetched_while_unassigned_are_fetched_again(
    bootstrap: str,
    unique_name: Callable[[str], str],
    tables: Tables,
    make_restorer: Callable[..., Restorer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The churn race, forced: a partition is unassigned right after the consumer returned
    a batch of its records (so they are not written) and assigned again before the
    restorer's next turn, while the consumer still fetches it past those records."""
    topic = unique_name("refetch")
    create_topic(bootstrap, topic, 1)
    tables.add(TableDef(name=topic, topic=topic, partitions=1, value_format=Format.STRING))
    oracle: Oracle = {}
    records = random_records(1, 3000, 500, seed=8)
    produce(bootstrap, topic, records, oracle, flush_every=500)
    tp = (topic, 0)

    restorer = make_restorer()
    apply_batch = restorer._apply
    raced = threading.Event()

    def racing_apply(*args: Any) -> None:
        messages = args[-1]
        if raced.is_set() or not any(m.error() is None for m in messages):
            apply_batch(*args)
            return
        raced.set()
        restorer.assign(set(), set())
        apply_batch(*args)
        restorer.assign({tp}, set())

    monkeypatch.setattr(restorer, "_apply", racing_apply)
    restorer.assign({tp}, set())
    wait_for(lambda: all_in(restorer, [tp], ReplicaState.ACTIVE), "active", timeout_s=15)

    assert raced.is_set()
    assert contents(restorer, tp) == oracle[0]
    st = restorer.status(tp)
    assert st is not None
    assert st.position == st.end == len(records)
    assert restorer.records_applied == len(records)  # the first batch only once, later
    assert restorer.refetches == 1


def test_misplaced_records_are_counted_kept_and_survive_a_restart(
    bootstrap: str,
    unique_name: Callable[[str], str],
    tables: Tables,
    make_restorer: Callable[..., Restorer],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = unique_name("misplaced")
    create_topic(bootstrap, topic, 3)
    tables.add(TableDef(name=topic, topic=topic, partitions=3, value_format=Format.STRING))
    oracle: Oracle = {}
    # Placed by a rule of their own (k % 3), not by murmur2: about two in three are misplaced.
    records = random_records(3, 900, 300, seed=5)
    produce(bootstrap, topic, records, oracle, flush_every=300)
    expected = {
        p: sum(1 for q, k, _ in records if q == p and k and partition_for(k, 3) != p)
        for p in range(3)
    }
    assert all(expected.values())
    tps = [(topic, p) for p in range(3)]
    state = tmp_path / "misplaced-state"

    restorer = make_restorer(state)
    restorer.assign(set(tps), set())
    wait_for(lambda: all_in(restorer, tps, ReplicaState.ACTIVE), "all partitions active")
    for p in range(3):
        st = restorer.status((topic, p))
        assert st is not None
        assert st.misplaced == expected[p]
        # Kept where they are: every record is served from the partition it is in.
        assert contents(restorer, (topic, p)) == oracle.get(p, {})
    warnings = [r for r in caplog.records if "partitioner (murmur2) puts" in r.getMessage()]
    assert len(warnings) == 3  # once per partition, each with an example key
    restorer.stop()

    again = make_restorer(state)
    again.assign(set(tps), set())
    wait_for(lambda: all_in(again, tps, ReplicaState.ACTIVE), "active after the restart")
    assert {p: again.status((topic, p)).misplaced for p in range(3)} == expected  # type: ignore[union-attr]
    assert again.records_applied == 0  # nothing replayed: the count came from the store


@pytest.mark.parametrize("partitioner", [Partitioner.ANY, Partitioner.CRC32])
def test_records_where_the_partitioner_puts_them_are_not_misplaced(
    bootstrap: str,
    unique_name: Callable[[str], str],
    tables: Tables,
    make_restorer: Callable[..., Restorer],
    partitioner: Partitioner,
) -> None:
    topic = unique_name("placed")
    create_topic(bootstrap, topic, 3)
    tables.add(
        TableDef(
            name=topic,
            topic=topic,
            partitions=3,
            value_format=Format.STRING,
            partitioner=partitioner,
        )
    )
    keys = [f"key-{i}".encode() for i in range(200)]
    produce(bootstrap, topic, [(crc32_partition(k, 3), k, b"v") for k in keys])
    restorer = make_restorer()
    tps = [(topic, p) for p in range(3)]
    restorer.assign(set(tps), set())
    wait_for(lambda: all_in(restorer, tps, ReplicaState.ACTIVE), "all partitions active")
    assert [restorer.status(tp).misplaced for tp in tps] == [0, 0, 0]  # type: ignore[union-attr]


def test_a_windowed_key_is_placed_by_its_key_alone(
    bootstrap: str,
    unique_name: Callable[[str], str],
    tables: Tables,
    make_restorer: Callable[..., Restorer],
) -> None:
    topic = unique_name("misplaced-windows")
    create_topic(bootstrap, topic, 4)
    table = tables.add(
        TableDef(
            name=topic,
            topic=topic,
            partitions=4,
            kind=TableKind.WINDOWED,
            window_size_ms=1000,
            value_format=Format.STRING,
        )
    )
    codec = key_codec(table)
    records: list[tuple[int, bytes | None, bytes | None]] = []
    for i in range(40):
        key = codec.parse_text(f"store-{i}")
        home = partition_for(key, 4)
        for start in (0, 1000):
            records.append((home, window_wire_key(key, start), b"1"))
    stray = codec.parse_text("stray")
    records.append(((partition_for(stray, 4) + 1) % 4, window_wire_key(stray, 0), b"1"))
    produce(bootstrap, topic, records)
    restorer = make_restorer()
    tps = [(topic, p) for p in range(4)]
    restorer.assign(set(tps), set())
    wait_for(lambda: all_in(restorer, tps, ReplicaState.ACTIVE), "all partitions active")
    assert sum(restorer.status(tp).misplaced for tp in tps) == 1  # type: ignore[union-attr]
