"""A partition's changelog read again, for a watch of a range that resumes from further back
than its replica's position (`replay`).

A watch of a range hears of live changes from the position the replica had when it
subscribed (`sparkiq.node.changes`); a client that resumes it with an older position needs
the changes in between, and those are in the changelog, not in the store (it holds only the
latest value of each key). `replay` reads them with a short-lived consumer of its own: assigned
at the resumed position with an explicit offset (no group, nothing committed), on the
restorer's consumer settings, up to the replica's position, handing on the records whose
store key the watch accepts, batch by batch. A position older than the log's start
(compacted or deleted records) starts at the earliest record left (`auto.offset.reset`).

The consumer's calls block, so they run on a thread of the replay's own, in order; a replay
closed early (its watcher gone) closes its consumer on that thread once a call in flight
returns, without waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TypeVar

from confluent_kafka import Consumer, Message
from confluent_kafka import KafkaError as CKafkaError
from confluent_kafka import TopicPartition as CTopicPartition

from sparkiq.core.errors import KafkaError, SparkiqError
from sparkiq.core.kstreams import stored_value
from sparkiq.core.topology import TopicPartition
from sparkiq.kafka.security import KafkaSecurity
from sparkiq.node.changes import Change
from sparkiq.node.restore import StoreKeyFn
from sparkiq.node.restore.fetch import new_consumer

T = TypeVar("T")

REPLAY_BATCH = 1_000  # records per consume() call, and so at most per batch handed on
_POLL_S = 0.5
# Once the consumer reached the end of the log short of the position, how long it waits for
# records past it before it takes the rest for offsets without records (transaction
# markers, compaction).
_AFTER_EOF_S = 1.0


async def replay(
    bootstrap: str,
    security: KafkaSecurity,
    tp: TopicPartition,
    since: int,
    until: int,
    key_fn: StoreKeyFn | None,
    accepts: Callable[[bytes], bool],
    *,
    stall_s: float = 30.0,
) -> AsyncIterator[list[Change]]:
    """The changes of `tp` at offsets [`since`, `until`) whose store key `accepts` takes,
    in offset order, in batches (a change's position is its offset + 1). `key_fn`: the
    table's wire key -> store key (None: the same); records without a key, or whose key it
    refuses, are not changes (the restorer skips them too).

    Raises `KafkaError` when the changelog yields nothing for `stall_s` (the broker is gone).
    """
    if since >= until:
        return
    executor = ThreadPoolExecutor(1, thread_name_prefix="sparkiq-replay")
    loop = asyncio.get_running_loop()

    async def run(fn: Callable[[], T]) -> T:
        return await loop.run_in_executor(executor, fn)

    def open_consumer() -> Consumer:
        c = new_consumer(bootstrap, {}, security)
        c.assign([CTopicPartition(tp[0], tp[1], since)])
        return c

    consumer: Consumer | None = None
    try:
        consumer = await run(open_consumer)
        consume = partial(consumer.consume, REPLAY_BATCH, _POLL_S)
        reader = _Reader(tp, until, key_fn, accepts)
        heard = time.monotonic()
        while not reader.done:
            messages: list[Message] = await run(consume)
            now = time.monotonic()
            if messages:
                heard = now
            elif reader.eof_at is not None and now - reader.eof_at >= _AFTER_EOF_S:
                return  # nothing past the end: the offsets up to `until` hold no record
            elif now - heard >= stall_s:
                raise KafkaError(
                    f"the changelog {tp[0]}[{tp[1]}] yielded nothing for {stall_s:g}s while "
                    f"replaying offsets {since}..{until - 1}; is the broker reachable?"
                )
            changes = reader.read(messages, now)
            if changes:
                yield changes
    finally:
        if consumer is not None:
            with contextlib.suppress(RuntimeError):  # the executor is shut down already
                executor.submit(consumer.close)
        executor.shutdown(wait=False)


class _Reader:
    """Turns consumed records into the changes of one replay; knows when it is done."""

    def __init__(
        self,
        tp: TopicPartition,
        until: int,
        key_fn: StoreKeyFn | None,
        accepts: Callable[[bytes], bool],
    ) -> None:
        self._tp = tp
        self._until = until
        self._key_fn = key_fn
        self._accepts = accepts
        self.done = False
        self.eof_at: float | None = None  # when the consumer last reached the log's end

    def read(self, messages: list[Message], now: float) -> list[Change]:
        out: list[Change] = []
        for msg in messages:
            err = msg.error()
            offset = msg.offset()
            if offset is None:
                continue  # an error of the consumer, not of this partition
            if err is not None:
                # Other errors pass (librdkafka retries them); one that lasts stalls the
                # replay, which then gives up (`stall_s`).
                if err.code() == CKafkaError._PARTITION_EOF:
                    if offset >= self._until:
                        self.done = True
                    else:
                        self.eof_at = now
                continue
            if offset >= self._until:
                self.done = True
                break
            self.eof_at = None
            if offset == self._until - 1:
                self.done = True
            key = msg.key()
            if key is None:
                continue
            wire = key
            if self._key_fn is not None:
                try:
                    key = self._key_fn(key)
                except (SparkiqError, ValueError):
                    continue
            if self._accepts(key):
                out.append(Change(key, stored_value(self._key_fn, wire, msg.value()), offset + 1))
            if self.done:
                break
        return out
