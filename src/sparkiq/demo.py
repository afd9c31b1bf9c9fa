"""`sparkiq demo`: the dev broker, sample data registered as tables, and serving nodes.

Everything it starts binds to 127.0.0.1 and is stopped by PID when the demo ends (Ctrl-C or
`--duration`). While it runs it keeps updating the sample data, so answers change.
"""

from __future__ import annotations

import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import click
import httpx
import orjson
from confluent_kafka import Producer

from sparkiq.broker import DevBroker
from sparkiq.catalog import register_table
from sparkiq.kafka.admin import create_topic
from sparkiq.localcluster import LocalCluster
from sparkiq.tables import Format, TableDef

CUSTOMERS = "customers"
CITIES = ["Lisbon", "Porto", "Berlin", "Paris", "Oslo", "Madrid", "Rome", "Vienna"]
TIERS = ["BASIC", "SILVER", "GOLD", "PRIME"]


def _step(text: str) -> None:
    click.echo(click.style("==> ", fg="cyan") + text)


def customer_record(rng: random.Random, cid: int) -> dict[str, object]:
    return {
        "id": f"C{cid:05d}",
        "name": f"Customer {cid}",
        "city": rng.choice(CITIES),
        "tier": rng.choice(TIERS),
        "balance": round(rng.uniform(0, 5000), 2),
        "updated_ms": int(time.time() * 1000),
    }


def produce_customers(
    bootstrap: str,
    count: int,
    *,
    seed: int = 7,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Create the customers topic, write `count` customers and register the table."""
    create_topic(bootstrap, CUSTOMERS, 6)
    rng = random.Random(seed)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 20}
    )
    for cid in range(count):
        rec = customer_record(rng, cid)
        producer.produce(CUSTOMERS, key=str(rec["id"]).encode(), value=orjson.dumps(rec))
        if cid % 1000 == 999:
            producer.poll(0)
            if progress is not None:
                progress(cid + 1)
    if producer.flush(30) != 0:
        raise click.ClickException("the dev broker did not take all sample records")
    register_table(
        bootstrap,
        TableDef(
            name=CUSTOMERS,
            topic=CUSTOMERS,
            partitions=6,
            key_format=Format.STRING,
            value_format=Format.JSON,
            description="sample customers, latest record per customer id",
        ),
    )


@contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_demo(
    *,
    nodes: int = 3,
    duration_s: float | None = None,
    base_dir: Path | None = None,
    customers: int = 5_000,
) -> None:
    own_dir = base_dir is None
    work = Path(tempfile.mkdtemp(prefix="sparkiq-demo-")) if base_dir is None else base_dir
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with _stop_on_sigterm(), DevBroker(log_path=work / "broker.log") as broker:
        bootstrap = broker.bootstrap_servers
        _step(f"dev broker on {bootstrap} (pid {broker.pid})")
        _step(f"writing {customers} sample customers to topic '{CUSTOMERS}' (6 partitions)")
        produce_customers(
            bootstrap,
            customers,
            progress=lambda n: click.echo(f"\r    {n}/{customers} records", nl=False),
        )
        click.echo()
        _step(f"starting {nodes} serving nodes (state and logs in {work})")
        cluster = LocalCluster(bootstrap, work, nodes=nodes)
        try:
            cluster.start()
            cluster.wait_ready(
                timeout_s=120,
                progress=lambda r, n: click.echo(f"\r    {r}/{n} nodes ready", nl=False),
            )
            click.echo()
            _step(f"cluster ready in {time.monotonic() - started:.1f}s")
            _print_examples(cluster, bootstrap)
            _keep_updating(bootstrap, duration_s, customers)
        except KeyboardInterrupt:
            click.echo()
        finally:
            _step("stopping nodes and the dev broker")
            cluster.stop()
    if own_dir:
        shutil.rmtree(work, ignore_errors=True)


def _print_examples(cluster: LocalCluster, bootstrap: str) -> None:
    urls = cluster.urls
    key = "C00042"
    click.echo("\nnodes:")
    for url in urls:
        click.echo(f"    {url}")
    examples = [
        f"{urls[0]}/v1/tables",
        f"{urls[0]}/v1/tables/{CUSTOMERS}/keys/{key}",
        f"{urls[-1]}/v1/tables/{CUSTOMERS}/keys/{key}",
        f"{urls[0]}/v1/tables/{CUSTOMERS}/keys/{key}/owner",
        f"{urls[0]}/v1/tables/{CUSTOMERS}/range?prefix=C0001&limit=3",
        f"{urls[0]}/v1/metadata",
    ]
    click.echo("\ntry (any node answers any key):")
    for ex in examples:
        click.echo(f"    curl -s '{ex}'")
    click.echo(
        f"    curl -s -X POST {urls[1]}/v1/tables/{CUSTOMERS}/multi-get "
        '-d \'{"keys": ["C00001", "C00002", "nope"]}\''
    )
    click.echo(f"    sparkiq get {CUSTOMERS} {key} --url {urls[1]}")
    click.echo(f"    sparkiq cluster --url {urls[0]}")
    click.echo(f"    export SPARKIQ_BOOTSTRAP_SERVERS={bootstrap}")
    click.echo("\nfor example:")
    for ex in examples[1:3]:
        body = httpx.get(ex, timeout=10).text
        click.echo(f"    GET {ex}\n      -> {body}")
    click.echo("\nthe demo keeps updating customers; Ctrl-C stops it.")
    sys.stdout.flush()


def _keep_updating(bootstrap: str, duration_s: float | None, customers: int) -> None:
    rng = random.Random()
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    deadline = None if duration_s is None else time.monotonic() + duration_s
    try:
        while deadline is None or time.monotonic() < deadline:
            for _ in range(20):
                rec = customer_record(rng, rng.randrange(customers))
                producer.produce(CUSTOMERS, key=str(rec["id"]).encode(), value=orjson.dumps(rec))
            producer.poll(0)
            time.sleep(0.5)
    finally:
        producer.flush(10)
