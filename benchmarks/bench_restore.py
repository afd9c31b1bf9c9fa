"""Restore throughput against its ceiling, a bare tuned consumer, measured in the same run.

Starts a broker (Apache Kafka; `--broker dev`: the dev broker), produces N records (10-byte
keys, 100-byte values, 6 partitions), then times, 3 runs each and alternating:

(a) a bare confluent-kafka consumer in assign() mode with the restorer's tuned settings,
    reading every record and doing nothing with it;
(b) the `Restorer` restoring every partition into a fresh state dir, from `assign()` until
    every partition is ACTIVE.

Prints the medians and the ratio restore / bare (goal: >= 0.80). The records are placed
with `--partitioner` (murmur2, as sparkiq's sinks and Kafka's Java clients do, by default;
crc32 is librdkafka's default) and the table says so: the restorer checks every record's
partition with it.

    .venv/bin/python benchmarks/bench_restore.py [--records N] [--partitioner crc32]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from sparkiq.core.partitioner import Partitioner
from sparkiq.core.tables import Format, TableDef
from sparkiq.dev.broker import make_broker
from sparkiq.kafka.admin import create_topic
from sparkiq.node.restore import BATCH_SIZE, CONSUMER_CONF, ReplicaState, Restorer
from sparkiq.node.stores.registry import StoreRegistry

PARTITIONS = 6


# librdkafka's setting that places keyed records as each table partitioner does.
_LIBRDKAFKA = {
    Partitioner.MURMUR2: "murmur2_random",
    Partitioner.CRC32: "consistent_random",
    Partitioner.FNV1A: "fnv1a_random",
}


def produce(bootstrap: str, topic: str, n: int, partitioner: Partitioner) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": _LIBRDKAFKA[partitioner],
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "compression.type": "none",
        }
    )
    value = b"v" * 100
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, key=b"k%09d" % (i % 1_000_000_000), value=value)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 100_000 == 0:
            producer.poll(0)
    producer.flush()
    return n / (time.perf_counter() - t0)


def _cpu_s() -> float:
    """CPU seconds of this process so far, all threads (librdkafka and RocksDB included)."""
    t = os.times()
    return t.user + t.system


def bare_consume(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    conf: dict[str, str | int | float | bool] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4()}",
    }
    conf.update(CONSUMER_CONF)
    conf["enable.partition.eof"] = False
    consumer = Consumer(conf)
    c0, t0 = _cpu_s(), time.perf_counter()
    consumer.assign([CTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got = 0
    while got < n:
        got += len(consumer.consume(BATCH_SIZE, 1.0))
    elapsed, cpu = time.perf_counter() - t0, _cpu_s() - c0
    consumer.close()
    return n / elapsed, cpu * 1e6 / n


def restore(bootstrap: str, table: TableDef, n: int) -> tuple[float, float]:
    state_dir = Path(tempfile.mkdtemp(prefix="sparkiq-bench-restore-"))
    done = threading.Event()
    tps = {(table.topic, p) for p in range(PARTITIONS)}
    restorer: Restorer

    def on_change() -> None:
        st = restorer.statuses()
        if all(tp in st and st[tp].state is ReplicaState.ACTIVE for tp in tps):
            done.set()

    restorer = Restorer(
        bootstrap, StoreRegistry(state_dir), {table.topic: table}.get, on_change=on_change
    )
    try:
        restorer.start()
        c0, t0 = _cpu_s(), time.perf_counter()
        restorer.assign(tps, set())
        if not done.wait(600):
            raise SystemExit("restore did not finish within 10 minutes")
        elapsed, cpu = time.perf_counter() - t0, _cpu_s() - c0
        if restorer.records_applied != n:
            raise SystemExit(f"restore applied {restorer.records_applied} records, not {n}")
        return n / elapsed, cpu * 1e6 / n
    finally:
        restorer.stop()
        shutil.rmtree(state_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records to produce")
    parser.add_argument("--runs", type=int, default=3, help="runs of each measurement")
    parser.add_argument(
        "--partitioner",
        choices=[p.value for p in _LIBRDKAFKA],
        default="murmur2",
        help="how the records are placed, and the table's partitioner",
    )
    parser.add_argument(
        "--broker",
        choices=["kafka", "dev"],
        default="kafka",
        help="Apache Kafka (KRaft, one node; the default) or the dev broker",
    )
    args = parser.parse_args()
    n: int = args.records
    partitioner = Partitioner(args.partitioner)

    with make_broker(args.broker) as broker:
        bootstrap = broker.bootstrap_servers
        topic = f"bench-restore-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, PARTITIONS)
        rate = produce(bootstrap, topic, n, partitioner)
        print(f"produced {n:,} records at {rate:,.0f} records/s")
        table = TableDef(
            name="bench",
            topic=topic,
            partitions=PARTITIONS,
            value_format=Format.BYTES,
            partitioner=partitioner,
        )
        bare: list[tuple[float, float]] = []
        restored: list[tuple[float, float]] = []
        for run in range(1, args.runs + 1):
            bare.append(bare_consume(bootstrap, topic, n))
            restored.append(restore(bootstrap, table, n))
            print(
                f"run {run}: bare {bare[-1][0]:,.0f} records/s ({bare[-1][1]:.2f} us CPU/record), "
                f"restore {restored[-1][0]:,.0f} records/s ({restored[-1][1]:.2f} us CPU/record)"
            )
        b = statistics.median(x for x, _ in bare)
        r = statistics.median(x for x, _ in restored)
        bc = statistics.median(c for _, c in bare)
        rc = statistics.median(c for _, c in restored)
        print(f"median bare consume: {b:,.0f} records/s, {bc:.2f} us CPU/record")
        print(f"median restore:      {r:,.0f} records/s, {rc:.2f} us CPU/record")
        print(f"restore / bare:      {r / b:.2f} (goal >= 0.80); CPU ratio {bc / rc:.2f}")


if __name__ == "__main__":
    main()
