"""End to end: Kafka semantics a changelog may show that a plain producer never writes.

- Transactions: a changelog written by a transactional producer, with committed and aborted
  transactions, one left open for a while. Two `sparkiq serve` processes (one standby per
  partition) serve only committed records; they catch up although every partition ends in
  a transaction marker (the end offset counts markers, so no record sits at end - 1), and
  their `/v1/metadata` positions, the answers' `offset`/`token` and `after=` reads agree
  with the true ends, before and after more transactions arrive while they run.
- The log start moves: while two nodes are stopped, the records after their stores'
  positions are removed from two changelogs, one by a short retention (`cleanup.policy=
  delete`), one by DeleteRecords. Restarted, the nodes (each the active of some partitions
  and the standby of the others) go on from the log start without stalling, log and count
  the offsets they skipped, and hold what they had plus every record from the log start.
  A running standby whose node is paused while retention removes records it had not
  fetched does the same once resumed.
- Compaction: a compacted changelog (short `segment.ms`, `min.cleanable.dirty.ratio` and
  `delete.retention.ms`) is written while one node follows it, with updates, deletes and
  keys written again after their delete, until the cleaner has removed every tombstone. A
  second node restores it from scratch and, alone, answers every key and range exactly as
  the first did, and as the oracle says.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import shutil
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, Message, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from prometheus_client.parser import text_string_to_metric_families

from sparkiq.core.partitioner import partition_for
from sparkiq.core.tables import TableDef
from sparkiq.dev.kafkabroker import KafkaBroker
from sparkiq.dev.localcluster import LocalCluster, NodeProcess
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from tests.support.e2e import Oracle, fetch_all, mismatches, read_topic

pytestmark = pytest.mark.e2e

PARTITIONS = 3
NODE_ENV = {
    "SPARKIQ_STANDBY_REPLICAS": "1",
    "SPARKIQ_SESSION_TIMEOUT_MS": "6000",
    "SPARKIQ_HEARTBEAT_INTERVAL_MS": "500",
}


def _app(prefix: str) -> str:
    return f"{prefix}{int(time.time() * 1000) % 10**9}"


def end_offsets(
    bootstrap: str, topic: str, *, committed: bool = True, partitions: int = PARTITIONS
) -> dict[int, int]:
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
            for p in range(partitions)
        }
    finally:
        consumer.close()


def end_offsets_of(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    return end_offsets(bootstrap, topic, partitions=partitions)


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


# A broker of its own for the tests that need Kafka to delete and clean logs within seconds.
CLEANING_BROKER = {
    "log.initial.task.delay.ms": "0",  # Kafka's retention checks begin 30 s after its start
    "log.retention.check.interval.ms": "500",
    "log.segment.delete.delay.ms": "0",
    "log.cleaner.backoff.ms": "300",
}


@pytest.fixture(scope="module")
def cleaning_bootstrap() -> Iterator[str]:
    with KafkaBroker(settings=CLEANING_BROKER) as b:
        yield b.bootstrap_servers
        gc.collect()


Produced = list[tuple[str, Any | None, int, int]]  # (key, value, partition, offset)


def produce_records(bootstrap: str, topic: str, records: list[tuple[str, Any | None]]) -> Produced:
    """Write *records* (value None: a tombstone); what Kafka stored, with partitions and offsets."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5}
    )
    out: Produced = []

    def on_delivery(err: Any, msg: Message) -> None:
        assert err is None, f"delivery failed: {err}"
        raw = msg.value()
        value = None if raw is None else orjson.loads(raw)
        out.append(((msg.key() or b"").decode(), value, msg.partition() or 0, msg.offset() or 0))

    for key, value in records:
        producer.produce(
            topic,
            key=key.encode(),
            value=None if value is None else orjson.dumps(value),
            on_delivery=on_delivery,
        )
    assert producer.flush(30) == 0
    return out


def oracle_of(produced: Produced, kept: Callable[[int, int], bool]) -> Oracle:
    """The table of the records *kept* (partition, offset) says a replica applied."""
    oracle = Oracle()
    for key, value, partition, offset in sorted(produced, key=lambda r: (r[2], r[3])):
        oracle.partition_of[key] = partition
        if kept(partition, offset):
            oracle.apply(key, value, partition)
    return oracle


def log_starts(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "e2e-starts"})
    try:
        return {
            p: consumer.get_watermark_offsets(CTopicPartition(topic, p), timeout=10)[0]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def set_topic_config(bootstrap: str, topic: str, name: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def wait_log_starts(
    bootstrap: str, topic: str, partitions: int, at_least: Mapping[int, int], timeout_s: float
) -> dict[int, int]:
    deadline = time.monotonic() + timeout_s
    while True:
        starts = log_starts(bootstrap, topic, partitions)
        if all(starts[p] >= at_least[p] for p in range(partitions)):
            return starts
        if time.monotonic() >= deadline:
            pytest.fail(f"log starts of {topic} {starts}, not yet {dict(at_least)}")
        time.sleep(0.3)


def versions(prefix: str, keys: range, version: int) -> list[tuple[str, Any | None]]:
    return [(f"{prefix}{i:04d}", {"key": f"{prefix}{i:04d}", "v": version}) for i in keys]


def skipped_offsets(node: NodeProcess) -> dict[tuple[str, int], float]:
    """(table, partition) -> the node's counter of offsets skipped past a moved log start."""
    out: dict[tuple[str, int], float] = {}
    for family in text_string_to_metric_families(node.http_get("/metrics", 5.0).text):
        if family.name == "sparkiq_restore_truncated_offsets":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    labels = sample.labels
                    out[(labels["table"], int(labels["partition"]))] = sample.value
    return out


def test_log_start_moved_past_stopped_replicas(cleaning_bootstrap: str, tmp_path: Path) -> None:
    started = time.monotonic()
    bootstrap = cleaning_bootstrap
    app = _app("trunc")
    parts = 2
    topics = {"aged": f"{app}-aged", "cut": f"{app}-cut"}
    create_topic(bootstrap, topics["aged"], parts, config={"cleanup.policy": "delete"})
    create_topic(bootstrap, topics["cut"], parts)
    produced: dict[str, Produced] = {}
    for table, topic in topics.items():
        register_table(bootstrap, TableDef(table, topic, parts), app=app)
        produced[table] = produce_records(bootstrap, topic, versions("a", range(300), 0))
    first = {t: end_offsets_of(bootstrap, topic, parts) for t, topic in topics.items()}

    with LocalCluster(bootstrap, tmp_path, nodes=2, app=app, env=NODE_ENV) as c:
        c.wait_settled(timeout_s=60)
        c.stop()
        # While the nodes are down: updates and new keys, then the log start moves past
        # the stores' positions (into the new records for "cut"), then more records.
        for table, topic in topics.items():
            produced[table] += produce_records(
                bootstrap, topic, versions("a", range(0, 300, 2), 1) + versions("b", range(200), 1)
            )
        ends = end_offsets_of(bootstrap, topics["aged"], parts)
        set_topic_config(bootstrap, topics["aged"], "retention.ms", "1")
        wait_log_starts(bootstrap, topics["aged"], parts, ends, timeout_s=30)
        set_topic_config(bootstrap, topics["aged"], "retention.ms", "-1")
        middle = end_offsets_of(bootstrap, topics["cut"], parts)
        cut_at = {p: (first["cut"][p] + middle[p]) // 2 for p in range(parts)}
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.delete_records(
            [CTopicPartition(topics["cut"], p, at) for p, at in cut_at.items()]
        ).values():
            future.result(30)
        for table, topic in topics.items():
            produced[table] += produce_records(
                bootstrap, topic, versions("a", range(1, 300, 3), 2) + versions("c", range(100), 2)
            )
        starts = {t: log_starts(bootstrap, topic, parts) for t, topic in topics.items()}
        assert starts["cut"] == cut_at
        for table in topics:
            assert all(starts[table][p] > first[table][p] for p in range(parts)), starts

        for node in c.nodes:
            node.start()
        c.wait_settled(timeout_s=60)
        checked = 0
        for table, topic in topics.items():
            assert log_starts(bootstrap, topic, parts) == starts[table]  # no more went
            expected = oracle_of(
                produced[table],
                lambda p, off, t=table: off < first[t][p] or off >= starts[t][p],
            )
            keys = sorted(expected.partition_of)
            for node in c.nodes:
                answers = asyncio.run(fetch_all(node.url, table, keys))
                wrong = mismatches(answers, expected)
                assert not wrong, (node.url, table, wrong)
                checked += len(keys)
        for node in c.nodes:
            log_text = node.log_path.read_text()
            counts = skipped_offsets(node)
            for table, topic in topics.items():
                for p in range(parts):
                    lost = starts[table][p] - first[table][p]
                    assert counts.get((table, p)) == lost, (node.url, table, p, counts)
                    line = f"{topic}[{p}]: offsets {first[table][p]} to {starts[table][p] - 1}"
                    assert line in log_text, (node.url, line)
    print(f"log start moved: {checked} answers checked in {time.monotonic() - started:.1f} s")


def test_a_running_standby_passed_by_the_log_start_goes_on_from_it(
    cleaning_bootstrap: str, tmp_path: Path
) -> None:
    """The standby's node is paused (SIGSTOP, within its session timeout) while records are
    written and retention removes them; resumed, its standby goes on from the log start,
    counts the offsets it skipped, and holds what it had plus what came after (read from it
    once it is the only node)."""
    started = time.monotonic()
    bootstrap = cleaning_bootstrap
    app = _app("lapse")
    topic = f"{app}-aged"
    create_topic(bootstrap, topic, 1, config={"cleanup.policy": "delete"})
    register_table(bootstrap, TableDef("aged", topic, 1), app=app)
    produced = produce_records(bootstrap, topic, versions("a", range(200), 0))
    env = {**NODE_ENV, "SPARKIQ_SESSION_TIMEOUT_MS": "10000"}
    with LocalCluster(bootstrap, tmp_path, nodes=2, app=app, env=env) as c:
        c.wait_settled(timeout_s=60)
        meta = c.nodes[0].http_get("/v1/metadata", 5.0).json()
        (row,) = [p for p in meta["partitions"] if p["table"] == "aged"]
        standby = next(n for n in c.nodes if [n.url] == row["standbys"])
        active = next(n for n in c.nodes if n.url == row["active"])
        before = end_offsets_of(bootstrap, topic, 1)[0]
        pid = standby.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            # A fetch the paused node sent before is answered, empty, before what follows.
            time.sleep(0.5)
            produced += produce_records(
                bootstrap, topic, versions("a", range(0, 200, 2), 1) + versions("b", range(50), 1)
            )
            ends = end_offsets_of(bootstrap, topic, 1)
            set_topic_config(bootstrap, topic, "retention.ms", "1")
            wait_log_starts(bootstrap, topic, 1, ends, timeout_s=20)
            set_topic_config(bootstrap, topic, "retention.ms", "-1")
            produced += produce_records(bootstrap, topic, versions("c", range(50), 2))
        finally:
            os.kill(pid, signal.SIGCONT)
        start = log_starts(bootstrap, topic, 1)[0]
        assert start > before
        wait_positions(c.nodes, "aged", topic, end_offsets_of(bootstrap, topic, 1))
        assert skipped_offsets(standby) == {("aged", 0): start - before}
        assert skipped_offsets(active) == {}
        assert f"{topic}[0]: offsets {before} to {start - 1}" in standby.log_path.read_text()
        # Alone, the node that skipped answers from its own store.
        active.stop()
        deadline = time.monotonic() + 30
        while {r[0] for r in local_positions(standby, "aged").values()} != {"active"}:
            assert time.monotonic() < deadline, local_positions(standby, "aged")
            time.sleep(0.2)
        expected = oracle_of(produced, lambda p, off: off < before or off >= start)
        checked = check_node_alone(standby, "aged", expected)
    print(f"running standby: {checked} keys checked in {time.monotonic() - started:.1f} s")


def compacted_log(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    return read_topic(bootstrap, topic, timeout_s=20.0)


def check_node_alone(node: NodeProcess, table: str, oracle: Oracle) -> int:
    """*node* (the only one) answers every key ever written, and a range over all of them,
    as *oracle* says; the number of keys checked."""
    keys = sorted(oracle.partition_of)
    answers = asyncio.run(fetch_all(node.url, table, keys))
    assert not mismatches(answers, oracle), (node.url, mismatches(answers, oracle))
    assert {b["node"] for st, b in answers.values() if st == 200} == {node.url}
    page = node.http_get(f"/v1/tables/{table}/range?limit=1000", 10.0).json()
    assert page["next_cursor"] is None
    assert [(i["key"], i["value"]) for i in page["items"]] == oracle.sorted_items()
    return len(keys)


def test_compacted_without_tombstones_restores_the_same_table(
    cleaning_bootstrap: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    bootstrap = cleaning_bootstrap
    app = _app("compact")
    parts = 3
    topic = f"{app}-profiles"
    create_topic(
        bootstrap,
        topic,
        parts,
        config={
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "0",
            "min.compaction.lag.ms": "0",
        },
    )
    register_table(bootstrap, TableDef("profiles", topic, parts), app=app)
    fillers: dict[int, str] = {}
    for i in range(1000):
        name = f"filler-{i}"
        fillers.setdefault(partition_for(name.encode(), parts), name)
        if len(fillers) == parts:
            break
    rng = random.Random(55)
    names = [f"k{i:04d}" for i in range(400)]
    oracle = Oracle()
    tombstones = 0

    def write(records: list[tuple[str, Any | None]]) -> None:
        for key, value, partition, _ in sorted(
            produce_records(bootstrap, topic, records), key=lambda r: (r[2], r[3])
        ):
            oracle.apply(key, value, partition)

    with LocalCluster(bootstrap, tmp_path, nodes=1, app=app, env=NODE_ENV) as c:
        witness = c.nodes[0]
        c.wait_ready(60)
        # Rounds in segments of their own: every key written, some deleted, some of the
        # deleted ones written again (their tombstone then sits between two values).
        for r in range(5):
            write([(k, {"key": k, "round": r}) for k in names if rng.random() < 0.7])
            gone = rng.sample(names, 60)
            write([(k, None) for k in gone])
            tombstones += len(gone)
            write([(k, {"key": k, "round": r, "again": True}) for k in gone[:15]])
            time.sleep(0.15)
        # Fillers roll and dirty the segments until the cleaner has removed every tombstone
        # (it marks them in one pass and removes them in a later one).
        deadline = time.monotonic() + 40
        while True:
            write([(f, {"filler": time.monotonic()}) for f in fillers.values()])
            log = compacted_log(bootstrap, topic)
            if all(value is not None for _, value in log):
                break
            assert time.monotonic() < deadline, "the cleaner left tombstones in the log"
            time.sleep(0.3)
        produced = sum(oracle.produced_per_partition.values())
        print(f"compaction: {produced} records written ({tombstones} tombstones), {len(log)} left")
        assert len(log) < produced - tombstones
        ends = end_offsets(bootstrap, topic, partitions=parts)
        wait_positions([witness], "profiles", topic, ends)
        checked = check_node_alone(witness, "profiles", oracle)

        fresh = c.add_node()
        c.wait_ready(60)
        wait_positions([witness, fresh], "profiles", topic, ends, timeout_s=60)
        witness.stop()
        deadline = time.monotonic() + 30
        while {r[0] for r in local_positions(fresh, "profiles").values()} != {"active"}:
            assert time.monotonic() < deadline, local_positions(fresh, "profiles")
            time.sleep(0.2)
        checked += check_node_alone(fresh, "profiles", oracle)
    print(f"compaction: {checked} answers checked in {time.monotonic() - started:.1f} s")
