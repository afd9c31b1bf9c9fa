"""End to end: Kafka semantics a changelog may show that a plain producer never writes.

- Transactions: a changelog written by a transactional producer, with committed and aborted
  transactions, one left open for a while. Two `sparkiq serve` processes (one standby per
  partition) serve only committed records; they catch up although every partition ends in
  a transaction marker (the end offset counts markers, so no record sits at end - 1), and
  their `/v1/metadata` positions, the answers' `offset`/`token` and `after=` reads agree
  with the true ends, before and after more transactions arrive while they run.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, Message, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from sparkiq.core.tables import TableDef
from sparkiq.dev.localcluster import LocalCluster, NodeProcess
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from tests.support.e2e import Oracle, fetch_all, mismatches

pytestmark = pytest.mark.e2e

PARTITIONS = 3
NODE_ENV = {
    "SPARKIQ_STANDBY_REPLICAS": "1",
    "SPARKIQ_SESSION_TIMEOUT_MS": "6000",
    "SPARKIQ_HEARTBEAT_INTERVAL_MS": "500",
}


def _app(prefix: str) -> str:
    return f"{prefix}{int(time.time() * 1000) % 10**9}"


def end_offsets(bootstrap: str, topic: str, *, committed: bool = True) -> dict[int, int]:
    """Each partition's end as Kafka lists it (read_committed: the last stable offset)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "e2e-ends",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    try:
        return {
            p: consumer.get_watermark_offsets(CTopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def local_positions(node: NodeProcess, table: str) -> dict[int, tuple[str, int, int, int]]:
    """partition -> (state, position, end, lag) of *node*'s replicas of *table*."""
    meta = node.http_get("/v1/metadata", 5.0).json()
    return {
        r["partition"]: (r["state"], r["position"], r["end"], r["lag"])
        for r in meta["local"]
        if r["table"] == table
    }


def wait_positions(
    nodes: list[NodeProcess],
    table: str,
    topic: str,
    ends: Mapping[int, int],
    timeout_s: float = 30.0,
) -> None:
    """Until every node's every replica of *table* (changelog *topic*) is active or standby
    at exactly *ends*."""
    want = {p: end for p, end in ends.items()}
    deadline = time.monotonic() + timeout_s
    while True:
        seen = {n.url: local_positions(n, table) for n in nodes}
        if all(
            set(local) == set(want)
            and all(
                st in ("active", "standby") and pos == want[p] and end == want[p] and lag == 0
                for p, (st, pos, end, lag) in local.items()
            )
            for local in seen.values()
        ):
            return
        if time.monotonic() >= deadline:
            uncommitted = end_offsets(nodes[0].bootstrap_servers, topic, committed=False)
            pytest.fail(
                f"replicas not at the ends {want} after {timeout_s:.0f}s: {seen} "
                f"(the high watermarks: {uncommitted})"
            )
        time.sleep(0.2)


class Transactions:
    """A transactional producer, and the oracle of what its committed transactions wrote."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": f"{topic}-tx",
                "partitioner": "murmur2_random",
                "linger.ms": 5,
            }
        )
        self.producer.init_transactions(30)
        self.oracle = Oracle()
        self.aborted_keys: set[str] = set()  # keys written only by aborted transactions
        self.offsets: dict[str, tuple[int, int]] = {}  # key -> (partition, offset) committed
        self.transactions = 0

    def run(self, records: list[tuple[str, Any | None]], *, commit: bool) -> None:
        """One transaction writing *records* (value None: a tombstone), committed or not."""
        delivered: list[tuple[str, Any | None, int, int]] = []

        def on_delivery(err: Any, msg: Message) -> None:
            assert err is None, f"delivery failed: {err}"
            key = (msg.key() or b"").decode()
            raw = msg.value()
            value = None if raw is None else orjson.loads(raw)
            delivered.append((key, value, msg.partition() or 0, msg.offset() or 0))

        self.producer.begin_transaction()
        for key, value in records:
            self.producer.produce(
                self.topic,
                key=key.encode(),
                value=None if value is None else orjson.dumps(value),
                on_delivery=on_delivery,
            )
        assert self.producer.flush(30) == 0
        if commit:
            self.producer.commit_transaction(30)
            for key, value, partition, offset in sorted(delivered, key=lambda d: d[3]):
                self.oracle.apply(key, value, partition)
                self.offsets[key] = (partition, offset)
                self.aborted_keys.discard(key)
        else:
            self.producer.abort_transaction(30)
            self.aborted_keys.update(k for k, *_ in delivered if k not in self.oracle.partition_of)
        self.transactions += 1

    def keys(self) -> list[str]:
        return sorted(self.oracle.partition_of.keys() | self.aborted_keys)


def tx_value(key: str, tx: int, committed: bool) -> dict[str, Any]:
    return {"key": key, "tx": tx, "committed": committed}


def feed(tx: Transactions, first: int, rounds: int, keys: int) -> None:
    """*rounds* pairs of transactions: one committed, one aborted (over the same keys and keys
    of its own); every few rounds the committed one deletes some keys."""
    for r in range(first, first + rounds):
        names = [f"k{(r * 37 + i) % keys:05d}" for i in range(60)]
        records: list[tuple[str, Any | None]] = [(k, tx_value(k, r, True)) for k in names]
        if r % 3 == 2:
            records += [(k, None) for k in names[:10]]
        tx.run(records, commit=True)
        aborted = [(k, tx_value(k, r, False)) for k in names[::2]]
        aborted += [(f"aborted-{r:03d}-{i:02d}", tx_value("x", r, False)) for i in range(10)]
        aborted += [(k, None) for k in names[20:30]]  # aborted deletes: the values stay
        tx.run(aborted, commit=False)


def check_answers(nodes: list[NodeProcess], table: str, tx: Transactions) -> int:
    keys = tx.keys()
    for node in nodes:
        answers = asyncio.run(fetch_all(node.url, table, keys))
        assert not mismatches(answers, tx.oracle), (node.url, mismatches(answers, tx.oracle))
        for key, (status, body) in answers.items():
            if status == 200:
                assert body["value"]["committed"] is True, (key, body)
                assert body["partition"] == tx.offsets[key][0], (key, body)
    return len(keys)


def check_tokens(nodes: list[NodeProcess], table: str, tx: Transactions) -> None:
    """A caught-up replica's token is the true end (markers counted); `after=` it, and after
    a committed record's offset, answer at once on every node."""
    ends = end_offsets(nodes[0].bootstrap_servers, tx.topic)
    for partition in range(PARTITIONS):
        key = next(k for k in sorted(tx.oracle.latest) if tx.oracle.partition_of[k] == partition)
        for node in nodes:
            body = node.http_get(f"/v1/tables/{table}/keys/{key}", 5.0).json()
            # `offset`: the next offset the answering replica was to apply.
            assert body["offset"] == ends[partition], (node.url, body, ends)
            assert body["token"] == f"{partition}-{ends[partition]}", (node.url, body, ends)
        for node in nodes:
            for after in (ends[partition], tx.offsets[key][1] + 1):
                started = time.monotonic()
                resp = node.http_get(
                    f"/v1/tables/{table}/keys/{key}?after={partition}-{after}", 5.0
                )
                took = time.monotonic() - started
                assert resp.status_code == 200, (node.url, after, resp.text)
                assert resp.json()["value"] == tx.oracle.latest[key]
                assert took < 0.5, (node.url, after, took)


@pytest.fixture
def tx_cluster(bootstrap: str, tmp_path: Path) -> Iterator[tuple[LocalCluster, Transactions, str]]:
    app = _app("tx")
    topic = f"{app}-orders"
    create_topic(bootstrap, topic, PARTITIONS)
    tx = Transactions(bootstrap, topic)
    feed(tx, 0, 12, keys=400)
    register_table(bootstrap, TableDef("orders", topic, PARTITIONS), app=app)
    with LocalCluster(bootstrap, tmp_path, nodes=2, app=app, env=NODE_ENV) as c:
        yield c, tx, "orders"


def test_transactions_only_committed_records_are_served(
    tx_cluster: tuple[LocalCluster, Transactions, str], bootstrap: str
) -> None:
    c, tx, table = tx_cluster
    nodes = list(c.nodes)
    ends = end_offsets(bootstrap, tx.topic)
    assert ends == end_offsets(bootstrap, tx.topic, committed=False)  # nothing open
    c.wait_ready(timeout_s=60)
    # Each partition ends in an abort marker: caught up means at the end, markers counted.
    wait_positions(nodes, table, tx.topic, ends)
    checked = check_answers(nodes, table, tx)
    assert tx.aborted_keys
    assert checked > len(tx.oracle.latest)
    check_tokens(nodes, table, tx)

    # While the nodes run: more transactions, then one left open for a while (its records
    # are in the log, past the last stable offset), then aborted.
    feed(tx, 12, 4, keys=400)
    tx.producer.begin_transaction()
    for i in range(30):
        tx.producer.produce(tx.topic, key=f"k{i:05d}".encode(), value=b'{"committed": false}')
    assert tx.producer.flush(30) == 0
    stable = end_offsets(bootstrap, tx.topic)
    assert stable != end_offsets(bootstrap, tx.topic, committed=False)
    wait_positions(nodes, table, tx.topic, stable)
    check_answers(nodes, table, tx)
    check_tokens(nodes, table, tx)
    tx.producer.abort_transaction(30)
    ends = end_offsets(bootstrap, tx.topic)
    wait_positions(nodes, table, tx.topic, ends)
    check_answers(nodes, table, tx)
    check_tokens(nodes, table, tx)

    # A node restarted from its stores resumes past the markers, and one rebuilt from
    # scratch (its state dir removed) restores only the committed records.
    for fresh in (False, True):
        nodes[1].stop()
        if fresh:
            shutil.rmtree(nodes[1].state_dir)
        feed(tx, 16 + 2 * fresh, 2, keys=400)
        nodes[1].start()
        c.wait_ready(timeout_s=60)
        ends = end_offsets(bootstrap, tx.topic)
        wait_positions(nodes, table, tx.topic, ends)
        check_answers(nodes, table, tx)
        check_tokens(nodes, table, tx)
