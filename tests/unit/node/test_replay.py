"""A partition's changelog read again for a watch that resumes (node/replay.py), against the
Apache Kafka: exactly the accepted records of [since, until), in order, as changes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sparkiq.core.errors import KafkaError
from sparkiq.core.tables import TableDef, TableKind
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.security import PLAINTEXT
from sparkiq.node.changes import Change
from sparkiq.node.replay import replay
from sparkiq.node.restore import store_key_fn
from tests.support.restore import produce


async def collect(
    bootstrap: str,
    topic: str,
    since: int,
    until: int,
    accepts: Callable[[bytes], bool],
    **kwargs: float,
) -> list[Change]:
    out: list[Change] = []
    async for batch in replay(
        bootstrap, PLAINTEXT, (topic, 0), since, until, None, accepts, **kwargs
    ):
        out.extend(batch)
    return out


async def test_a_replay_yields_the_accepted_changes_between_two_positions(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("replay")
    create_topic(bootstrap, topic, 2)
    records: list[tuple[int, bytes | None, bytes | None]] = []
    for i in range(300):
        key = f"{'a' if i % 3 else 'b'}-{i % 50}".encode()
        records.append((0, key, None if i % 7 == 0 else f"v{i}".encode()))
    records.insert(10, (0, None, b"no key"))  # not a change
    produce(bootstrap, topic, records, flush_every=37)  # several record batches
    produce(bootstrap, topic, [(1, b"a-x", b"other partition")])

    def in_range(key: bytes) -> bool:
        return key.startswith(b"a-")

    def expected(since: int, until: int) -> list[Change]:
        return [
            Change(key, value, offset + 1)
            for offset, (_, key, value) in enumerate(records)
            if since <= offset < until and key is not None and in_range(key)
        ]

    assert await collect(bootstrap, topic, 0, len(records), in_range) == expected(0, 301)
    assert await collect(bootstrap, topic, 120, 200, in_range) == expected(120, 200)
    assert await collect(bootstrap, topic, 299, 301, in_range) == expected(299, 301)
    assert await collect(bootstrap, topic, 200, 200, in_range) == []


async def test_a_replay_turns_wire_keys_into_store_keys(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("replaywin")
    create_topic(bootstrap, topic, 1)
    table = TableDef(topic, topic, 1, kind=TableKind.WINDOWED, window_size_ms=1000)
    key_fn = store_key_fn(table)
    assert key_fn is not None
    wire = b"page" + (5000).to_bytes(8, "big")
    produce(bootstrap, topic, [(0, wire, b"1"), (0, b"x", b"bad key")])
    out = [
        change
        async for batch in replay(bootstrap, PLAINTEXT, (topic, 0), 0, 2, key_fn, lambda _: True)
        for change in batch
    ]
    assert out == [Change(key_fn(wire), b"1", 1)]  # the key it refuses is no change


async def test_a_replay_of_offsets_the_log_never_reaches_gives_up(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("replaystall")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [(0, b"a-1", b"v")])
    # Up to offset 5 of a log that ends at 1: the record, then nothing more.
    got = await collect(bootstrap, topic, 0, 5, lambda _: True, stall_s=2.0)
    assert got == [Change(b"a-1", b"v", 1)]
    with pytest.raises(KafkaError):
        await collect(bootstrap, "no-such-topic-" + topic, 0, 5, lambda _: True, stall_s=1.0)
