"""The point-of-sale pipeline in end-to-end tests: one run (its topics, `sparkiq run` process
and serving nodes), its seeded invoices, and every table of every node compared with
`PosOracle`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
import pytest

import sparkiq.dev.pos.pipeline as pos_pipeline
from sparkiq.core.errors import KafkaError
from sparkiq.dev.localcluster import LocalCluster
from sparkiq.dev.localpipeline import PipelineProcess
from sparkiq.dev.pos.generator import Invoice, InvoiceGenerator, produce_invoices, store_directory
from sparkiq.dev.pos.oracle import PosOracle
from sparkiq.kafka.admin import create_topic
from sparkiq.spark.connector import KafkaConnector
from sparkiq.spark.session import kafka_connector_jars

PIPELINE_FILE = Path(pos_pipeline.__file__)
START_MS = 1_763_000_000_000  # fixed, so windows are the same in every run


def wait_until(
    check: Callable[[], bool], what: str, timeout_s: float, pipeline: PipelineProcess
) -> None:
    """Polls *check* until true; a check that asks a loaded or recovering broker and times
    out is "not yet" (its last error goes into the failure message)."""
    deadline = time.monotonic() + timeout_s
    last_error = ""
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except KafkaError as exc:
            last_error = f" (last error: {exc})"
        if pipeline.proc is not None and not pipeline.is_running():
            pytest.fail(
                f"the pipeline exited ({pipeline.exit_code()}) before {what}: "
                f"{pipeline.log_path.read_text()[-3000:]}"
            )
        time.sleep(1.0)
    pytest.fail(
        f"timed out after {timeout_s:.0f}s waiting for {what}{last_error}; pipeline log tail: "
        f"{pipeline.log_path.read_text()[-3000:]}"
    )


class PosRun:
    """One app id: its topics, pipeline process and serving cluster."""

    def __init__(
        self,
        bootstrap: str,
        base: Path,
        app: str,
        *,
        nodes: int = 3,
        pipeline_args: Sequence[str] = (),
        layout: str = pos_pipeline.LAYOUTS[0],
        node_env: Mapping[str, str] | None = None,
        connector: KafkaConnector = KafkaConnector.AUTO,
        trigger: str = "1 second",
    ) -> None:
        """*node_env*: settings of every serving node (e.g. SPARKIQ_STANDBY_REPLICAS);
        *trigger*: the pipeline's ``--trigger`` (``realtime``: Real-Time Mode where it can)."""
        self.bootstrap = bootstrap
        # `auto` takes Spark's connector where the set-up installed it (the session puts it
        # on the class path), else sparkiq's: the run says which, and it must be that one.
        self.connector = (
            connector
            if connector is not KafkaConnector.AUTO
            else KafkaConnector.BUILTIN
            if kafka_connector_jars()
            else KafkaConnector.PYTHON
        )
        self.app = app
        self.topics = {name: f"{app}-{t}" for name, t in pos_pipeline.DEFAULT_TOPICS.items()}
        create_topic(bootstrap, self.topics["source"], 3)
        self.pipeline = PipelineProcess(
            pipeline_file=PIPELINE_FILE,
            bootstrap_servers=bootstrap,
            checkpoint_dir=base / "checkpoints",
            log_path=base / "pipeline.log",
            app=app,
            params={
                **{f"{name}_topic": t for name, t in self.topics.items()},
                "table_partitions": "4",
                "layout": layout,
            },
            extra_args=[
                "--trigger",
                trigger,
                "--kafka-connector",
                connector.value,
                *pipeline_args,
            ],
        )
        self.cluster = LocalCluster(bootstrap, base / "nodes", nodes=nodes, app=app, env=node_env)

    def produce(self, invoices: list[Invoice], *, malformed_every: int = 0) -> int:
        written = produce_invoices(
            self.bootstrap, self.topics["source"], iter(invoices), malformed_every=malformed_every
        )
        return len(written) // malformed_every if malformed_every else 0

    def start(self) -> None:
        """The pipeline first; the nodes once its queries run (a 2-core machine is small)."""
        self.pipeline.start()
        wait_until(self.pipeline.running, "the queries to start", 600, self.pipeline)
        assert f"pipeline: Kafka connector {self.connector.value} " in (
            self.pipeline.log_path.read_text()
        )
        self.cluster.start()

    def wait_caught_up(self, timeout_s: float = 600.0) -> None:
        wait_until(
            lambda: self.pipeline.caught_up([self.topics["source"]]),
            "the pipeline to process every invoice",
            timeout_s,
            self.pipeline,
        )

    def stop(self) -> None:
        self.pipeline.stop()
        self.cluster.stop()


def seeded_invoices(seed: int, count: int, *, customers: int = 150) -> list[Invoice]:
    gen = InvoiceGenerator(seed, stores=6, customers=customers)
    return list(gen.invoices(count, start_ms=START_MS, step_ms=40))


async def _get_json(session: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with session.get(url) as resp:
        return resp.status, orjson.loads(await resp.read())


async def table_mismatches(urls: list[str], oracle: PosOracle, limit: int = 5) -> list[str]:
    """Every key of every table, asked of every node, against the oracle."""
    wrong: list[str] = []
    sem = asyncio.Semaphore(32)
    async with aiohttp.ClientSession() as session:

        async def check(url: str, path: str, want: Any, compare: Callable[[Any], Any]) -> None:
            async with sem:
                status, body = await _get_json(session, f"{url}{path}")
            got = compare(body) if status == 200 else None
            if status != 200 or got != want:
                wrong.append(f"{url}{path}: {status} {got if status == 200 else body} != {want}")

        jobs = []
        for url in urls:
            for customer, reward in oracle.rewards.items():
                path = f"/v1/tables/rewards/keys/{quote(customer)}"
                jobs.append(check(url, path, reward, lambda b: b["value"]))
            for customer, invoice in oracle.latest_invoice.items():
                path = f"/v1/tables/latest-invoice/keys/{quote(customer)}"
                jobs.append(check(url, path, dict(invoice), lambda b: b["value"]))
            for row in store_directory():  # the global table, written once at the start
                path = f"/v1/tables/stores/keys/{quote(row['StoreID'])}"
                want = {k: v for k, v in row.items() if k != "StoreID"}
                jobs.append(check(url, path, want, lambda b: b["value"]))
            stores = sorted({store for store, _ in oracle.store_sales})
            for store in stores:
                want = {
                    start: value for (s, start), value in oracle.store_sales.items() if s == store
                }
                path = f"/v1/tables/store-sales/keys/{quote(store)}/windows"
                jobs.append(
                    check(url, path, want, lambda b: {w["start"]: w["value"] for w in b["items"]})
                )
        await asyncio.gather(*jobs)
    return sorted(wrong)[:limit]


def wait_tables_equal(run: PosRun, oracle: PosOracle, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    wrong: list[str] = []
    while time.monotonic() < deadline:
        wrong = asyncio.run(table_mismatches(run.cluster.urls, oracle))
        if not wrong:
            return
        time.sleep(2.0)
    pytest.fail(f"tables differ from the oracle after {timeout_s:.0f}s: {wrong}")
