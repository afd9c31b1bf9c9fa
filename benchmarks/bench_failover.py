"""Unavailability window and added latency through a kill -9, with and without standbys.

For each standby setting (default: 1, then 0) in the same run: a broker (Apache Kafka;
`--broker dev` for the dev broker), a table of N keys in 6 partitions, 3 `sparkiq serve`
nodes (session timeout 3 s, heartbeats 0.5 s), and a steady load of single-key GETs through
`sparkiq.Client` (threads cycling over all keys; the client asks a partition's standbys when
its active fails and retries 503s within its 15 s budget). After a quiet period one node is
killed with SIGKILL; the load goes on until the survivors have settled (map without the dead
node, every replica caught up) and 3 s more. Reports, per setting:

- requests before the kill: p50 / p99 latency (the baseline);
- requests started after the kill: p50 / p99 / max latency, failures (budget exhausted);
- the longest time any key was unanswerable: the slowest request, from its first attempt
  to its answer (retries included);
- the window: from the kill until the last request slower than 100 ms finished.

    .venv/bin/python benchmarks/bench_failover.py [--keys N] [--standbys 1 0] [--threads 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from confluent_kafka import Producer

from sparkiq.client import Client
from sparkiq.core.errors import ClientError
from sparkiq.core.tables import Format, TableDef
from sparkiq.dev.broker import make_broker
from sparkiq.dev.localcluster import LocalCluster
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table

TABLE = "accounts"
PARTITIONS = 6
SLOW_S = 0.1


@dataclass
class Sample:
    started: float
    latency: float
    ok: bool
    standby: bool


@dataclass
class Load:
    """Threads of single-key GETs through `sparkiq.Client`, every request recorded."""

    urls: list[str]
    keys: list[str]
    values: dict[str, object]
    threads: int
    samples: list[Sample] = field(default_factory=list)
    wrong: int = 0  # answers of an active that differ from the table
    stale: int = 0  # answers of a standby that differ (older, within the lag bound)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, index: int) -> None:
        keys = self.keys[index :: self.threads]
        random.Random(index).shuffle(keys)
        with Client(self.urls, budget_s=15.0, timeout_s=2.0) as client:
            while not self._stop.is_set():
                for key in keys:
                    if self._stop.is_set():
                        return
                    started = time.monotonic()
                    try:
                        entry = client.get_entry(TABLE, key)
                    except ClientError:
                        ok, standby, right = False, False, True
                    else:
                        ok = True
                        standby = bool(entry and entry.get("standby"))
                        right = (entry and entry["value"]) == self.values.get(key)
                    sample = Sample(started, time.monotonic() - started, ok, standby)
                    with self._lock:
                        self.samples.append(sample)
                        if not right:
                            if standby:
                                self.stale += 1
                            else:
                                self.wrong += 1

    def start(self) -> list[threading.Thread]:
        workers = [
            threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(self.threads)
        ]
        for worker in workers:
            worker.start()
        return workers

    def stop(self, workers: list[threading.Thread]) -> None:
        self._stop.set()
        for worker in workers:
            worker.join(20)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] if ordered else 0.0


def _produce(bootstrap: str, topic: str, keys: int) -> dict[str, object]:
    values: dict[str, object] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for i in range(keys):
        key = f"k{i:06d}"
        values[key] = {"key": key, "n": i, "pad": "x" * 40}
        producer.produce(topic, key=key.encode(), value=orjson.dumps(values[key]))
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return values


def run_one(
    standbys: int, keys: int, threads: int, base: Path, broker_kind: str
) -> dict[str, object]:
    with make_broker(broker_kind) as broker:
        bootstrap = broker.bootstrap_servers
        app = f"fo{standbys}"
        topic = f"{app}-accounts"
        create_topic(bootstrap, topic, PARTITIONS)
        values = _produce(bootstrap, topic, keys)
        register_table(
            bootstrap,
            TableDef(TABLE, topic, PARTITIONS, key_format=Format.STRING, value_format=Format.JSON),
            app=app,
        )
        env = {
            "SPARKIQ_SESSION_TIMEOUT_MS": "3000",
            "SPARKIQ_HEARTBEAT_INTERVAL_MS": "500",
            "SPARKIQ_STANDBY_REPLICAS": str(standbys),
        }
        with LocalCluster(bootstrap, base / f"s{standbys}", nodes=3, app=app, env=env) as cluster:
            cluster.wait_settled(timeout_s=120)
            load = Load(cluster.urls, sorted(values), values, threads)
            workers = load.start()
            time.sleep(5.0)
            load_before = os.getloadavg()[0]
            cluster.nodes[0].stop(kill=True)
            killed = time.monotonic()
            cluster.wait_settled(timeout_s=120)
            settled = time.monotonic() - killed
            time.sleep(3.0)
            load.stop(workers)
            load_after = os.getloadavg()[0]
    before = [s.latency for s in load.samples if s.started < killed - 0.5]
    after = [s for s in load.samples if s.started >= killed]
    slow_ends = [s.started + s.latency - killed for s in after if s.latency > SLOW_S]
    return {
        "standby_replicas": standbys,
        "keys": keys,
        "threads": threads,
        "requests_before": len(before),
        "before_p50_ms": round(_pct(before, 0.5) * 1000, 1),
        "before_p99_ms": round(_pct(before, 0.99) * 1000, 1),
        "requests_after": len(after),
        "after_p50_ms": round(_pct([s.latency for s in after], 0.5) * 1000, 1),
        "after_p99_ms": round(_pct([s.latency for s in after], 0.99) * 1000, 1),
        "longest_unanswerable_s": round(max((s.latency for s in after), default=0.0), 2),
        "window_s": round(max(slow_ends, default=0.0), 2),
        "failed": sum(not s.ok for s in after),
        "wrong": load.wrong,
        "stale_standby_answers": load.stale,
        "standby_answers": sum(s.standby for s in after),
        "settled_after_s": round(settled, 1),
        "loadavg_1m_before_after": [round(load_before, 2), round(load_after, 2)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--keys", type=int, default=3_000)
    parser.add_argument("--standbys", type=int, nargs="+", default=[1, 0])
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument(
        "--broker",
        choices=["kafka", "dev"],
        default="kafka",
        help="Apache Kafka (KRaft, one node; the default) or the dev broker",
    )
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}, load average at start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="bench-failover-") as tmp:
        for standbys in args.standbys:
            result = run_one(standbys, args.keys, args.threads, Path(tmp), args.broker)
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
