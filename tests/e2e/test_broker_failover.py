"""End to end: a broker of a three-broker Apache Kafka cluster dies under load, twice.

A KRaft cluster of three brokers (replication factor 3, `min.insync.replicas` 2, as sparkiq's
topics get from the brokers' defaults); the POS pipeline (`sparkiq run`) and three serving
nodes with a standby per partition. Seeded invoices are processed and every table from every
node equals the oracle; then invoices keep arriving at a small rate (idempotent producer,
each delivery's partition and offset kept) while a query load asks every key of every table
of every node in turn. The broker that coordinates the serving group and leads the most
changelog partitions (the app id is chosen so that one broker does both) gets `kill -9`,
stays down 30 s and starts again; once every replica is back in sync, the same to the broker
that coordinates the group now (another one). Then:

- no answer was a 500 or wrong: each value is one the oracle allows for some prefix of each
  source partition, never behind what every node held before the first kill
  (`tests.support.poshistory`), and each found key's answer says its changelog offset;
- the serving group re-formed on a live coordinator each time, the pipeline (the same
  process) went on from where it was, and at the end every table from every node equals the
  oracle of every invoice delivered.

It prints the figures: the longest time each key class went without a right answer, the
answers and keys checked, how long the group took to re-form and how long the pipeline's
tables query went without completing a micro-batch.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
import pytest
from confluent_kafka import Producer

from sparkiq.dev.kafkabroker import KafkaBroker
from sparkiq.dev.pos.generator import Invoice, InvoiceGenerator, store_directory
from sparkiq.dev.pos.oracle import PosOracle
from sparkiq.dev.pos.pipeline import pos_tables
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.clientlog import LOG_CONF
from sparkiq.spark.materialize import changelog_topic_config
from tests.support.e2e import read_records
from tests.support.kafkacluster import (
    GroupView,
    admin,
    coordinator_of,
    describe_group_apart,
    leaders,
    replication,
    wait_all_in_sync,
    wait_offsets_topic,
)
from tests.support.pos import START_MS, PosRun, wait_tables_equal
from tests.support.poshistory import Delivered, PosHistory

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.timeout(900)]

DOWN_S = 30.0  # each broker stays down this long (the figure)
FIRST = 300  # invoices processed and checked before any broker dies
RATE = 5.0  # invoices per second while brokers die
CUSTOMERS = 40
STEP_MS = 40
NODE_ENV = {
    "SPARKIQ_STANDBY_REPLICAS": "1",
    "SPARKIQ_SESSION_TIMEOUT_MS": "3000",
    "SPARKIQ_HEARTBEAT_INTERVAL_MS": "500",
}
TABLE_PARTITIONS = 4  # as `PosRun` runs the pipeline
KV_TABLES = ("rewards", "latest-invoice")
CLASSES = (*KV_TABLES, "store-sales", "stores")


class InvoiceStream:
    """Produces invoices (idempotent, acks=all) and keeps where each one was delivered."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._topic = topic
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "partitioner": "murmur2_random",
                "enable.idempotence": True,
                "linger.ms": 5,
                **LOG_CONF,
            }
        )
        self.delivered: list[Delivered] = []
        self.delivered_at: list[float] = []  # monotonic time of each delivery report
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def produce(self, invoice: Invoice) -> None:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                self.failed.append(f"{invoice['InvoiceNumber']}: {err}")
            else:
                self.delivered.append(Delivered(invoice, msg.partition(), msg.offset()))
                self.delivered_at.append(time.monotonic())

        self._producer.produce(
            self._topic,
            key=invoice["StoreID"].encode(),
            value=orjson.dumps(invoice),
            on_delivery=on_delivery,
        )
        self._producer.poll(0)

    def flush(self) -> None:
        assert self._producer.flush(60) == 0, "invoices not delivered within 60 s"
        assert not self.failed, self.failed[:3]

    def start(self, invoices: Iterator[Invoice], rate_per_s: float) -> None:
        def run() -> None:
            started = time.monotonic()
            for i, invoice in enumerate(invoices):
                if self._stop.wait(max(0.0, started + i / rate_per_s - time.monotonic())):
                    return
                self.produce(invoice)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def longest_wait(self, since: float) -> float:
        """The longest time after *since* without a delivery report."""
        times = [since, *(t for t in self.delivered_at if t > since)]
        return max(b - a for a, b in itertools.pairwise(times))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.flush()


@dataclass(frozen=True)
class Answer:
    started: float
    ended: float
    node: int
    table: str
    key: str
    status: int  # -1: no HTTP answer
    value: Any = None
    offset: int | None = None
    partition: int | None = None


def _path(table: str, key: str) -> str:
    if table == "store-sales":
        return f"/v1/tables/{table}/keys/{quote(key)}/windows"
    return f"/v1/tables/{table}/keys/{quote(key)}"


class VerifiedLoad:
    """Asks every (table, key) of every node in turn, a few requests at a time, and keeps
    every answer for checking (`PosHistory` needs every delivered invoice)."""

    def __init__(
        self, urls: Sequence[str], targets: Sequence[tuple[str, str]], per_node_rps: float
    ) -> None:
        self._urls = list(urls)
        self._targets = list(targets)
        self._interval = 1.0 / per_node_rps
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.answers: list[Answer] = []

    def __enter__(self) -> VerifiedLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await asyncio.gather(*(self._ask(session, i) for i in range(len(self._urls))))

    async def _ask(self, session: aiohttp.ClientSession, node: int) -> None:
        url = self._urls[node]
        i = node * len(self._targets) // len(self._urls)  # nodes start at different keys
        while not self._stop.is_set():
            table, key = self._targets[i % len(self._targets)]
            i += 1
            started = time.monotonic()
            try:
                async with session.get(url + _path(table, key)) as resp:
                    status, body = resp.status, orjson.loads(await resp.read())
            except (aiohttp.ClientError, TimeoutError) as exc:
                status, body = -1, {"error": str(exc)}
            self.answers.append(_answer(started, node, table, key, status, body))
            await asyncio.sleep(max(0.0, started + self._interval - time.monotonic()))


def _answer(started: float, node: int, table: str, key: str, status: int, body: Any) -> Answer:
    ended = time.monotonic()
    if status != 200:
        return Answer(started, ended, node, table, key, status, body)
    value = body.get("value")
    if table == "store-sales":
        value = {w["start"]: w["value"] for w in body.get("items", [])}
    return Answer(
        started, ended, node, table, key, status, value, body.get("offset"), body.get("partition")
    )


@dataclass
class Watch:
    """Polls, twice a second, the serving group (through the Admin API) and how far the
    pipeline's tables query has read."""

    bootstrap: str
    group: str
    run: PosRun
    groups: list[tuple[float, GroupView | None]] = field(default_factory=list)
    progress: list[tuple[float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Watch:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            view = describe_group_apart(self.bootstrap, self.group)
            self.groups.append((time.monotonic(), view))
            for query in (self.run.pipeline.status() or {}).get("queries", []):
                if query.get("name") == "tables" and query.get("end_offsets"):
                    read = sum(sum(p.values()) for p in query["end_offsets"].values())
                    self.progress.append((time.monotonic(), read))

    def reformed_after(self, killed_at: float, victim: int, members: int) -> float | None:
        """Seconds from *killed_at* until the group was stable with *members* members on
        a coordinator other than *victim*."""
        for at, view in self.groups:
            if (
                at > killed_at
                and view is not None
                and view.coordinator != victim
                and view.is_stable_with(members)
            ):
                return at - killed_at
        return None

    def longest_stall(self, since: float, until: float) -> float:
        """The longest time in [since, until] the tables query read nothing new."""
        changes = [since]
        last = None
        for at, read in self.progress:
            if last is not None and read > last and since <= at <= until:
                changes.append(at)
            last = read
        changes.append(until)
        return max(b - a for a, b in itertools.pairwise(changes))


def choose_victim(
    bootstrap: str, group: str, changelogs: Sequence[str], spared: set[int]
) -> tuple[int, GroupView, Counter[int]]:
    """The broker (not in *spared*) that coordinates *group*, else the one that leads the
    most *changelogs* partitions; with the group and the leader counts it was chosen from.
    Asked with new clients: one that saw a broker die keeps no stale view of it."""
    deadline = time.monotonic() + 30.0
    while (view := describe_group_apart(bootstrap, group)) is None:
        assert time.monotonic() < deadline, f"no broker describes group {group}"
        time.sleep(0.5)
    client = admin(bootstrap)
    assert view.coordinator == coordinator_of(client, group), "Kafka placed the group elsewhere"
    led = leaders(client, changelogs)
    candidates = [b for b in (1, 2, 3) if b not in spared]
    victim = max(candidates, key=lambda b: (b == view.coordinator, led[b]))
    return victim, view, led


def unavailability(answers: Sequence[Answer], right: Sequence[bool]) -> dict[str, float]:
    """Per key class, the longest time any one key went without a right answer (from any
    node): between two right answers, or from the last one to the end."""
    times: dict[tuple[str, str], list[float]] = defaultdict(list)
    end = max(a.ended for a in answers)
    for a, ok in zip(answers, right, strict=True):
        if ok:
            times[(a.table, a.key)].append(a.ended)
    worst: dict[str, float] = dict.fromkeys(CLASSES, 0.0)
    for (table, _), seen in times.items():
        seen.sort()
        gaps = [b - a for a, b in zip(seen, [*seen[1:], end], strict=True)]
        worst[table] = max(worst[table], *gaps)
    return worst


def check_answers(answers: Sequence[Answer], history: PosHistory) -> tuple[list[str], list[bool]]:
    """What is wrong in *answers* (a 500, a wrong value, a found key without its offset),
    and per answer whether it was right (503s and the like are neither)."""
    stores = {
        row["StoreID"]: {k: v for k, v in row.items() if k != "StoreID"}
        for row in store_directory()
    }
    wrong: list[str] = []
    right: list[bool] = []
    for a in answers:
        ok = False
        if a.status in (200, 404):
            value = a.value if a.status == 200 else None
            if a.table == "stores":
                why = None if value == stores.get(a.key) else f"stores {a.key}: {value}"
            else:
                why = history.wrong(a.table, a.key, value)
            if a.status == 200 and not isinstance(a.offset, int):
                why = f"{a.table} {a.key}: an answer without its offset ({a.offset})"
            if why is not None:
                wrong.append(f"node {a.node}: {why}")
            ok = why is None
        elif a.status != 503:
            wrong.append(f"node {a.node}: {a.table} {a.key}: status {a.status}: {a.value}")
        right.append(ok)
    return wrong, right


def offsets_disagree(bootstrap: str, app: str, answers: Sequence[Answer]) -> list[str]:
    """Each found key's answer of a key-value table against the table's changelog, read at
    the end: its value is what the key's last record before the answer's offset holds (the
    offset is the next one its replica was to apply)."""
    wrong: list[str] = []
    for table in KV_TABLES:
        records: dict[tuple[int, str], list[tuple[int, Any]]] = defaultdict(list)
        for p, offset, key, value in read_records(bootstrap, f"{app}.table.{table}"):
            parsed = None if value is None else orjson.loads(value)
            records[(p, (key or b"").decode())].append((offset, parsed))
        for seen in records.values():
            seen.sort(key=lambda r: r[0])
        for a in answers:
            if a.table != table or a.status != 200 or a.partition is None or a.offset is None:
                continue
            seen = records.get((a.partition, a.key), [])
            before = bisect.bisect_left([offset for offset, _ in seen], a.offset)
            logged = seen[before - 1][1] if before else None
            if logged != a.value:
                wrong.append(
                    f"node {a.node}: {table} {a.key} at offset {a.offset} of partition "
                    f"{a.partition}: answered {a.value}, the changelog holds {logged}"
                )
    return wrong


def app_for_the_worst_case(bootstrap: str) -> str:
    """An app id whose serving group is coordinated by the broker that leads the most of its
    changelog partitions, so that one kill takes both. Kafka places leaders at random: the
    changelog topics are made here (sparkiq's `create_topic` with the pipeline's own table
    definitions, as the pipeline would make them; it finds them made), under new ids until
    that holds."""
    wait_offsets_topic(bootstrap)
    client = admin(bootstrap)
    base = int(time.time() * 1000) % 10**9
    for attempt in range(30):
        app = f"failover{base}x{attempt}"
        tables = list(pos_tables(app, TABLE_PARTITIONS).values())
        for table in tables:
            create_topic(
                bootstrap, table.topic, table.partitions, config=changelog_topic_config(table)
            )
        led = leaders(client, [t.topic for t in tables])
        if led[coordinator_of(client, f"{app}.serving")] == max(led.values()):
            return app
        for future in client.delete_topics([t.topic for t in tables]).values():
            future.result()
    raise AssertionError("no app id put the coordinator on the top changelog leader")


@pytest.fixture
def kafka3() -> Iterator[KafkaBroker]:
    with KafkaBroker(nodes=3) as cluster:
        yield cluster


def test_a_broker_killed_twice_under_load_fails_no_read_and_loses_nothing(
    kafka3: KafkaBroker, tmp_path: Path
) -> None:
    bootstrap = kafka3.bootstrap_servers
    app = app_for_the_worst_case(bootstrap)
    run = PosRun(bootstrap, tmp_path, app, node_env=NODE_ENV)
    group = f"{app}.serving"
    changelogs = [t.topic for t in pos_tables(app, TABLE_PARTITIONS).values()]
    gen = InvoiceGenerator(52, stores=6, customers=CUSTOMERS)
    stream = InvoiceStream(bootstrap, run.topics["source"])
    try:
        for i in range(FIRST):
            stream.produce(gen.invoice(START_MS + i * STEP_MS))
        stream.flush()
        run.start()
        run.wait_caught_up()
        run.cluster.wait_ready(timeout_s=120)
        wait_tables_equal(run, PosOracle.of(d.invoice for d in stream.delivered))
        # sparkiq's topics took the brokers' replication defaults.
        for topic in [*changelogs, f"{app}.catalog", f"{app}.progress", run.topics["source"]]:
            assert replication(admin(bootstrap), topic) == (3, "2"), topic
        floor: dict[int, int] = defaultdict(int)
        for d in stream.delivered:
            floor[d.partition] = max(floor[d.partition], d.offset + 1)
        customers = sorted({str(d.invoice["CustomerCardNo"]) for d in stream.delivered})
        stores = sorted({str(d.invoice["StoreID"]) for d in stream.delivered})
        targets = [
            *((t, c) for c in customers for t in KV_TABLES),
            *(("store-sales", s) for s in stores),
            *(("stores", row["StoreID"]) for row in store_directory()),
        ]
        later = (gen.invoice(START_MS + (FIRST + i) * STEP_MS) for i in range(10**6))
        stream.start(later, RATE)
        pipeline_pid = run.pipeline.pid
        kills: list[dict[str, Any]] = []
        with VerifiedLoad(run.cluster.urls, targets, per_node_rps=40) as load:
            with Watch(bootstrap, group, run) as watch:
                time.sleep(3.0)
                disturbed = time.monotonic()
                spared: set[int] = set()
                for _ in range(2):
                    victim, view, led = choose_victim(bootstrap, group, changelogs, spared)
                    kafka3.kill_node(victim)
                    killed_at = time.monotonic()
                    time.sleep(DOWN_S)
                    kafka3.start_node(victim)
                    in_sync_s = wait_all_in_sync(bootstrap, 3)
                    run.cluster.wait_ready(timeout_s=60)  # one map again, on every node
                    reformed = watch.reformed_after(killed_at, victim, 3)
                    kills.append(
                        {
                            "broker": victim,
                            "coordinator": view.coordinator,
                            "changelog leaders": dict(sorted(led.items())),
                            "leads the most": led[victim] == max(led.values()),
                            "re-formed s": None if reformed is None else round(reformed, 1),
                            "in sync s after restart": round(in_sync_s, 1),
                        }
                    )
                    spared.add(victim)
                    assert run.pipeline.is_running(), run.pipeline.log_path.read_text()[-3000:]
                stream.stop()
                run.wait_caught_up(timeout_s=180)
                stall = watch.longest_stall(disturbed, time.monotonic())
                producer_wait = stream.longest_wait(disturbed)
            oracle = PosOracle.of(d.invoice for d in stream.delivered)
            wait_tables_equal(run, oracle)
        assert run.pipeline.pid == pipeline_pid
        assert run.pipeline.is_running()
        assert all(n.is_running() for n in run.cluster.nodes)
    finally:
        stream.stop()
        run.stop()

    history = PosHistory(stream.delivered, floor)
    answers = load.answers
    wrong, right = check_answers(answers, history)
    statuses = Counter(a.status for a in answers)
    gaps = unavailability(answers, right)
    print(
        f"\n{len(answers)} answers checked ({dict(statuses)}), "
        f"{len({(a.table, a.key) for a in answers})} keys, {len(stream.delivered)} invoices; "
        f"kills: {kills}; pipeline stall (tables query) {stall:.1f} s (the invoices' producer "
        f"waited up to {producer_wait:.1f} s for a delivery); longest without a "
        f"right answer: " + ", ".join(f"{t} {s:.1f} s" for t, s in gaps.items())
    )
    assert statuses[500] == 0, statuses
    assert not wrong, wrong[:5]
    disagree = offsets_disagree(bootstrap, app, answers)
    assert not disagree, disagree[:5]
    assert len(answers) > 5_000, "the load hardly ran"
    for kill in kills:
        assert kill["re-formed s"] is not None, f"the group never re-formed: {kills}"
