"""The brokers sparkiq starts for its demo, tests and benchmarks, behind one interface.

    kafka   Apache Kafka in KRaft mode, one node or three (`sparkiq.dev.kafkabroker`): the
            default, the broker sparkiq's users run
    dev     the memory-only dev broker (Tansu, `sparkiq.dev.devbroker`): a second
            Kafka-protocol broker sparkiq stays compatible with; needs no Java

Production points ``--bootstrap-servers`` at its own Kafka cluster instead.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self

from sparkiq.core.errors import BrokerError
from sparkiq.dev.devbroker import DevBroker
from sparkiq.dev.kafkabroker import KafkaBroker


class BrokerKind(enum.StrEnum):
    KAFKA = "kafka"
    DEV = "dev"


def spark_connector_for(kind: BrokerKind | str) -> str:
    """The ``sparkiq run --kafka-connector`` a pipeline on a broker of *kind* takes.

    ``auto`` (Spark's own connector where installed) on Apache Kafka; ``python`` on the dev
    broker: it reports a partition's end as the base offset of its last record batch + 1
    (BASELINES.md), and Spark's Kafka source plans every micro-batch up to the end it is
    told, so the tail of the last batch stays unread until more records come (the POS
    pipeline read 3 of 3,000 invoices). sparkiq's source reads up to the true end.
    """
    return "python" if BrokerKind(kind) is BrokerKind.DEV else "auto"


class Broker(Protocol):
    """A broker (or cluster) this process started and stops."""

    @property
    def bootstrap_servers(self) -> str: ...

    @property
    def pid(self) -> int | None: ...

    def start(self) -> Self: ...

    def stop(self) -> None: ...

    def describe(self) -> str: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


def make_broker(
    kind: BrokerKind | str = BrokerKind.KAFKA,
    *,
    brokers: int = 1,
    data_dir: Path | None = None,
    port: int = 0,
    host: str = "127.0.0.1",
    progress: Callable[[str], None] | None = None,
) -> Broker:
    """A broker of *kind*, not started yet (`start()` or `with`). *port* and *data_dir*
    apply to the dev broker and to Apache Kafka respectively; the dev broker is one node.
    *progress* hears of a first installation of Apache Kafka's jars."""
    kind = BrokerKind(kind)
    if kind is BrokerKind.DEV:
        if brokers != 1:
            raise BrokerError("the dev broker runs as one node; use --broker kafka for 3")
        if data_dir is not None:
            data_dir.mkdir(parents=True, exist_ok=True)
        log = data_dir / "broker.log" if data_dir is not None else None
        return DevBroker(port=port, host=host, log_path=log)
    if port:
        raise BrokerError("Apache Kafka picks its own free ports; --port is for the dev broker")
    return KafkaBroker(nodes=brokers, host=host, data_dir=data_dir, progress=progress)
