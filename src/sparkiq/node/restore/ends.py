"""True end offsets read off the restorer thread."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from confluent_kafka import Consumer

from sparkiq.kafka.offsets import probe_consumer
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity

_T = TypeVar("_T")


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
