"""How fresh the demo's answers are: the time from producing an invoice until it shows.

`measure_freshness` produces probe invoices a few a second (the demo's generator goes on
meanwhile) and times each from the call to produce it until

- its customer's ``latest-invoice`` on a serving node shows it (or a later invoice of the
  customer): a table, written by the pipeline's tables query, restored by a node, answered
  over HTTP;
- its line items reach ``hadoop-sink``: the routes' query alone (in Spark's Real-Time Mode
  with ``sparkiq run --trigger realtime``).

A node is asked every `POLL_S` (one multi-get for every customer awaited), so a table's
figure is at most that, and the time of one request, late.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx
import orjson
from confluent_kafka import Consumer, Producer, TopicPartition

from sparkiq.dev.pos.generator import InvoiceGenerator
from sparkiq.kafka.admin import partition_count
from sparkiq.kafka.offsets import true_end_offsets

POLL_S = 0.02


def percentile(values: Sequence[float], q: float) -> float:
    """The *q* quantile of *values* (nearest rank, the larger one)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


@dataclass(frozen=True)
class Freshness:
    """Milliseconds per probe invoice: until its table answer, until its routed records."""

    table_ms: tuple[float, ...]
    routes_ms: tuple[float, ...]
    missed: int = 0  # probes whose table answer did not show within the time allowed

    def lines(self) -> list[str]:
        """The figures as the demo prints them."""

        def figures(ms: Sequence[float]) -> str:
            if not ms:
                return "none seen"
            return (
                f"p50 {percentile(ms, 0.5):.0f} ms, p90 {percentile(ms, 0.9):.0f} ms, "
                f"max {max(ms):.0f} ms ({len(ms)} invoices)"
            )

        out = [
            f"produce -> queryable (latest-invoice on a node): {figures(self.table_ms)}",
            f"produce -> routed (line items in hadoop-sink): {figures(self.routes_ms)}",
        ]
        if self.missed:
            out.append(f"{self.missed} invoices did not show in time")
        return out


class InvoiceTopicWatch:
    """When each invoice number first appears in a topic whose values are JSON objects with
    an ``InvoiceNumber`` (a table's changelog, or the routes' ``hadoop-sink``), read from
    the topic's end at the start; *group* names the consumer to the broker."""

    def __init__(
        self, bootstrap: str, topic: str, *, group: str = "sparkiq-demo-freshness"
    ) -> None:
        tps = [(topic, p) for p in range(partition_count(bootstrap, topic))]
        ends = true_end_offsets(bootstrap, tps)
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
        self._consumer.assign([TopicPartition(t, p, ends[(t, p)]) for t, p in tps])
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="freshness-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for msg in self._consumer.consume(num_messages=1000, timeout=0.05):
                if msg.error() is None and msg.value():
                    number = str(orjson.loads(msg.value() or b"{}").get("InvoiceNumber"))
                    self.seen.setdefault(number, time.monotonic())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()


def _shows(value: object, created: int, number: str) -> bool:
    if not isinstance(value, dict):
        return False
    return (int(value["CreatedTime"]), str(value["InvoiceNumber"])) >= (created, number)


@dataclass
class _Probe:
    customer: str
    number: str
    created: int
    sent: float  # monotonic, just before the call to produce


def measure_freshness(
    bootstrap: str,
    url: str,
    *,
    source: str,
    routes_topic: str,
    probes: int = 20,
    spacing_s: float = 0.2,
    seed: int = 4242,
    timeout_s: float = 30.0,
) -> Freshness:
    """Time *probes* invoices written to *source* every *spacing_s* (see the module): the
    node at *url* is asked for every customer still awaited at once (one multi-get every
    `POLL_S`), so a slow pipeline costs the demo its own delay, not one per probe."""
    gen = InvoiceGenerator(seed)
    watch = InvoiceTopicWatch(bootstrap, routes_topic)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    pending: list[_Probe] = []
    sent: dict[str, float] = {}
    table_ms: list[float] = []
    began = time.monotonic()
    try:
        with httpx.Client(timeout=5.0) as http:
            while len(sent) < probes or pending:
                now = time.monotonic()
                if len(sent) < probes and now >= began + len(sent) * spacing_s:
                    inv = gen.invoice(int(time.time() * 1000))
                    probe = _Probe(
                        str(inv["CustomerCardNo"]),
                        str(inv["InvoiceNumber"]),
                        int(inv["CreatedTime"]),
                        time.monotonic(),
                    )
                    producer.produce(source, key=inv["StoreID"].encode(), value=orjson.dumps(inv))
                    producer.poll(0)
                    pending.append(probe)
                    sent[probe.number] = probe.sent
                if now - began > probes * spacing_s + timeout_s:
                    break
                if pending:
                    keys = sorted({p.customer for p in pending})
                    answer = http.post(
                        f"{url}/v1/tables/latest-invoice/multi-get", json={"keys": keys}
                    )
                    if answer.status_code == 200:
                        values = {item["key"]: item["value"] for item in answer.json()["items"]}
                        at = time.monotonic()
                        for probe in list(pending):
                            if _shows(values.get(probe.customer), probe.created, probe.number):
                                table_ms.append((at - probe.sent) * 1000)
                                pending.remove(probe)
                time.sleep(POLL_S)
            producer.flush(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not set(sent) <= set(watch.seen):
            time.sleep(0.1)
    finally:
        watch.stop()
    routes_ms = [(watch.seen[n] - at) * 1000 for n, at in sent.items() if n in watch.seen]
    return Freshness(tuple(table_ms), tuple(routes_ms), len(pending))
