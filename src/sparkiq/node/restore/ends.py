"""True end offsets read off the restorer thread, and the lags of stores not assigned."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Set
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from confluent_kafka import Consumer

from sparkiq.core.tables import TableDef
from sparkiq.core.topology import TopicPartition
from sparkiq.kafka.offsets import probe_consumer, true_end_offsets
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity
from sparkiq.node.stores.registry import StoreRegistry

log = logging.getLogger(__name__)

_T = TypeVar("_T")


def disk_lags(
    bootstrap: str,
    registry: StoreRegistry,
    assigned: Set[TopicPartition],
    table_for_topic: Callable[[str], TableDef | None],
    probe: Consumer | None,
    security: KafkaSecurity = PLAINTEXT,
) -> dict[TopicPartition, int] | None:
    """How far behind its changelog's end each store on disk is that is not in `assigned`
    and still matches its table (for the node's join metadata); None if the ends cannot be
    read now."""
    stored: dict[TopicPartition, int] = {}
    for (_, partition), (table, offset) in registry.on_disk_tables().items():
        tp = (table.topic, partition)
        current = table_for_topic(table.topic)
        if tp in assigned or current is None or current.partitions != table.partitions:
            continue
        stored[tp] = offset
    if not stored:
        return {}
    try:
        ends = true_end_offsets(bootstrap, list(stored), consumer=probe, security=security)
    except Exception as exc:
        log.warning("cannot read end offsets for stores on disk: %s", exc)
        return None
    return {tp: max(ends.get(tp, off) - off, 0) for tp, off in stored.items()}


class EndProbe:
    """Runs true-end-offset reads (`sparkiq.kafka.offsets`) off the restorer thread.

    A read waits on short fetches (~0.2 s on the dev broker) that would otherwise stall
    restoring. One worker thread owns the probe consumer, so it is never used concurrently.
    """

    def __init__(self, bootstrap: str, security: KafkaSecurity = PLAINTEXT) -> None:
        self._bootstrap = bootstrap
        self._security = security
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="sparkiq-restorer-ends")
        self._consumer: Consumer | None = None

    def submit(self, fn: Callable[[Consumer], _T]) -> Future[_T]:
        return self._pool.submit(self._call, fn)

    def _call(self, fn: Callable[[Consumer], _T]) -> _T:
        if self._consumer is None:
            self._consumer = probe_consumer(self._bootstrap, self._security)
        return fn(self._consumer)

    def _close_consumer(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._pool.submit(self._close_consumer)
        self._pool.shutdown(wait=True, cancel_futures=False)
