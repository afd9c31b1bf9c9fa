"""The changes a node's replicas apply, to watchers of keys (node/changes.py).

`changes_of` on hand-made records; then a real restorer on Apache Kafka: a watcher's
snapshot and the changes after it make up every value the key took, in order, none twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from sparkiq.core.kstreams import session_changelog_key
from sparkiq.core.serde import window_store_key
from sparkiq.core.tables import Format, TableDef
from sparkiq.kafka.admin import create_topic
from sparkiq.node.changes import Change, ChangeFeed, changes_of
from sparkiq.node.restore import Restorer, store_key_fn
from tests.support.kstreamstables import session_table
from tests.support.restore import Tables, produce

pytest_plugins = ["tests.support.restore"]


@dataclass
class Record:
    """The part of a consumed message `changes_of` reads."""

    t: str
    p: int
    o: int
    k: bytes | None
    v: bytes | None
    err: object = None

    def topic(self) -> str:
        return self.t

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o

    def key(self) -> bytes | None:
        return self.k

    def value(self) -> bytes | None:
        return self.v

    def error(self) -> object:
        return self.err


def test_changes_of_takes_the_written_records_of_watched_partitions() -> None:
    records = [
        Record("t", 0, 4, b"a", b"1"),  # before the written range
        Record("t", 0, 5, b"a", b"2"),
        Record("t", 1, 9, b"b", b"x"),  # a partition nobody watches
        Record("t", 0, 6, None, b"3"),  # no key: skipped by the restorer too
        Record("t", 0, 7, b"bad", b"4"),  # the key function refuses it
        Record("t", 0, 8, b"a", None),  # a tombstone
        Record("t", 0, 9, b"a", b"5"),  # after the written range
    ]

    def store_key(wire: bytes) -> bytes:
        if wire == b"bad":
            raise ValueError("bad key")
        return b"s:" + wire

    got = changes_of(records, {("t", 0): (store_key, 5, 8)})
    assert got == {("t", 0): [Change(b"s:a", b"2", 6), Change(b"s:a", None, 9)]}


def test_changes_of_a_session_table_carry_the_stored_value_with_the_sessions_end() -> None:
    sessions = session_table(partitions=1)
    key_fn = store_key_fn(sessions)
    wire = session_changelog_key(b"k", 2_000, 1_000)
    got = changes_of(
        [Record("t", 0, 0, wire, b"\x00" * 7 + b"\x03"), Record("t", 0, 1, wire, None)],
        {("t", 0): (key_fn, 0, 1)},
    )
    assert got == {
        ("t", 0): [
            Change(
                window_store_key(b"k", 1_000), (2_000).to_bytes(8, "big") + b"\x00" * 7 + b"\x03", 1
            ),
            Change(window_store_key(b"k", 1_000), None, 2),
        ]
    }


async def test_a_watcher_hears_every_value_its_key_takes_after_its_snapshot(
    bootstrap: str,
    unique_name: Callable[[str], str],
    tables: Tables,
    make_restorer: Callable[..., Restorer],
) -> None:
    topic = unique_name("changes")
    create_topic(bootstrap, topic, 2)
    tables.add(TableDef(name=topic, topic=topic, partitions=2, value_format=Format.STRING))
    feed = ChangeFeed()
    feed.bind(asyncio.get_running_loop())
    restorer = make_restorer(feed=feed)
    tp = (topic, 0)
    restorer.assign({tp}, set())
    produce(bootstrap, topic, [(0, b"k", b"v0"), (0, b"other", b"x")])
    heard: list[tuple[bytes | None, int]] = []
    deleted = asyncio.Event()  # the last change: the key deleted

    def on_change(value: bytes | None, position: int) -> None:
        heard.append((value, position))
        if value is None:
            deleted.set()

    ended = asyncio.Event()
    sub = feed.subscribe(tp, b"k", on_change, ended.set)
    snapshot = None
    while snapshot is None or snapshot[1] < 2:  # until the first two records are in
        await asyncio.sleep(0.05)
        snapshot = restorer.snapshot(tp, b"k")
    assert snapshot == (b"v0", 2)
    heard.clear()  # what came before the snapshot is in it
    values = [f"v{i}".encode() for i in range(1, 30)]
    records: list[tuple[int, bytes | None, bytes | None]] = []
    for value in values:
        records += [(0, b"k", value), (0, b"other", b"y")]
    records.append((0, b"k", None))
    await asyncio.to_thread(produce, bootstrap, topic, records)
    async with asyncio.timeout(30):
        await deleted.wait()
    assert [v for v, _ in heard] == [*values, None]
    positions = [pos for _, pos in heard]
    assert positions == [snapshot[1] + 1 + 2 * i for i in range(len(values) + 1)]
    assert feed.watcher_count() == 1
    restorer.assign(set(), set())  # the replica goes: its watchers hear of it
    async with asyncio.timeout(10):
        await ended.wait()
    assert feed.watcher_count() == 0
    sub.close()  # after the end: nothing to do


async def test_a_range_watcher_hears_the_accepted_keys_of_its_partition_only() -> None:
    feed = ChangeFeed()
    feed.bind(asyncio.get_running_loop())
    heard: list[tuple[bytes, bytes | None, int]] = []
    keyed: list[tuple[bytes | None, int]] = []
    ended = asyncio.Event()

    def in_range(store_key: bytes) -> bool:
        return store_key.startswith(b"s:a")

    ranged = feed.subscribe_range(
        ("t", 0), in_range, lambda k, v, p: heard.append((k, v, p)), ended.set
    )
    key_sub = feed.subscribe(("t", 0), b"s:b", lambda v, p: keyed.append((v, p)), lambda: None)
    assert feed.watched(("t", 0))
    assert not feed.watched(("t", 1))
    assert feed.watcher_count() == 2
    records = [
        Record("t", 0, 5, b"a1", b"1"),
        Record("t", 0, 6, b"b", b"2"),  # outside the range; the key watcher's
        Record("t", 1, 9, b"a2", b"x"),  # another partition
        Record("t", 0, 7, b"a2", None),
    ]
    feed.publish(records, {("t", 0): (lambda wire: b"s:" + wire, 5, 7)})
    await asyncio.sleep(0)
    assert heard == [(b"s:a1", b"1", 6), (b"s:a2", None, 8)]
    assert keyed == [(b"2", 7)]
    key_sub.close()
    assert feed.watched(("t", 0))  # the range watcher still watches it
    feed.end([("t", 0)])
    async with asyncio.timeout(1):
        await ended.wait()
    assert not feed.watched(("t", 0))
    ranged.close()  # after the end: nothing to do
    assert feed.watcher_count() == 0


async def test_a_range_watcher_of_a_real_replica_misses_nothing_after_its_position(
    bootstrap: str,
    unique_name: Callable[[str], str],
    tables: Tables,
    make_restorer: Callable[..., Restorer],
) -> None:
    topic = unique_name("rangechanges")
    create_topic(bootstrap, topic, 1)
    tables.add(TableDef(name=topic, topic=topic, partitions=1, value_format=Format.STRING))
    feed = ChangeFeed()
    feed.bind(asyncio.get_running_loop())
    restorer = make_restorer(feed=feed)
    tp = (topic, 0)
    restorer.assign({tp}, set())
    produce(bootstrap, topic, [(0, b"a-0", b"v"), (0, b"b-0", b"v")])
    heard: list[tuple[bytes, bytes | None, int]] = []
    done = asyncio.Event()

    def on_change(key: bytes, value: bytes | None, position: int) -> None:
        heard.append((key, value, position))
        if value == b"last":
            done.set()

    sub = feed.subscribe_range(tp, lambda k: k.startswith(b"a-"), on_change, lambda: None)
    snapshot = None
    while snapshot is None or snapshot[1] < 2:
        await asyncio.sleep(0.05)
        snapshot = restorer.snapshot(tp, None)
    assert snapshot == (None, 2)
    heard.clear()  # before the position: in the changelog, not for the feed
    records: list[tuple[int, bytes | None, bytes | None]] = []
    for i in range(1, 40):
        records += [(0, f"a-{i}".encode(), b"v"), (0, f"b-{i}".encode(), b"v")]
    records.append((0, b"a-0", b"last"))
    await asyncio.to_thread(produce, bootstrap, topic, records)
    async with asyncio.timeout(30):
        await done.wait()
    expected = [
        (key, value, 2 + i + 1)
        for i, (_, key, value) in enumerate(records)
        if key is not None and key.startswith(b"a-")
    ]
    assert heard == expected
    sub.close()
    assert feed.watcher_count() == 0
