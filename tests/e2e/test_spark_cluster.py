"""End to end: the point-of-sale pipeline on a Spark standalone cluster, checked from every node.

A master and a worker started from pyspark's own launch classes on loopback
(`tests.support.sparkcluster`); `sparkiq run --master spark://127.0.0.1:PORT` runs
`sparkiq/dev/pos/pipeline.py` with its tasks on the worker's executor (reading and writing
Kafka with Spark's connector where installed: its jars go to the executor as `spark.jars`,
as users ship them); two serving nodes serve its tables, and every key of every table,
asked of each node, must equal `PosOracle` (the checks of `tests/e2e/test_pos.py`). Then
one more invoice: every node's freshness of `latest-invoice` (`/v1/tables`, `/metrics`)
shows a record written after it was produced, and the time since the pipeline's last
committed micro-batch.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from sparkiq.dev.pos.generator import InvoiceGenerator, produce_one
from sparkiq.dev.pos.oracle import PosOracle
from sparkiq.spark.connector import KafkaConnector
from sparkiq.spark.session import kafka_connector_jars
from tests.support.pos import START_MS, PosRun, seeded_invoices, wait_tables_equal
from tests.support.sparkcluster import standalone_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.timeout(900)]


def test_pos_pipeline_on_a_standalone_cluster_equals_the_oracle_from_every_node(
    bootstrap: str, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    invoices = seeded_invoices(seed=23, count=600)
    with standalone_cluster(tmp_path / "spark") as master:
        run = PosRun(
            bootstrap,
            tmp_path,
            unique_name("pos-cluster"),
            nodes=2,
            pipeline_args=["--master", master],
        )
        try:
            run.produce(invoices)
            run.start()
            run.wait_caught_up()
            run.cluster.wait_ready()
            wait_tables_equal(run, PosOracle.of(invoices))
            check_freshness(run)
        finally:
            run.stop()
        # The work ran on the cluster: the master took the application and the worker ran
        # its executor, whose Python workers ran the pipeline's tasks.
        assert (
            "Registering app sparkiq pipeline pipeline"
            in (tmp_path / "spark" / "master.log").read_text()
        )
        executors = list((tmp_path / "spark" / "work").glob("app-*/*/stderr"))
        assert executors, "no executor ran on the worker"
        assert any("Finished task" in e.read_text(errors="replace") for e in executors)
        if run.connector is KafkaConnector.BUILTIN:
            # Spark's Kafka connector reached the executor as users ship it: the driver
            # serves the jars of `spark.jars`, the executor fetches them.
            fetched = "".join(e.read_text(errors="replace") for e in executors)
            for jar in kafka_connector_jars():
                assert re.search(rf"Fetching spark://\S+/jars/{re.escape(jar.name)}", fetched)


def check_freshness(run: PosRun) -> None:
    """After one more invoice, every node applied a `latest-invoice` record written since,
    and says how long ago the pipeline committed a batch."""
    fresh = next(InvoiceGenerator(5, stores=6, customers=150).invoices(1, start_ms=START_MS * 2))
    produced = time.monotonic()
    produce_one(run.bootstrap, run.topics["source"], fresh)
    with httpx.Client(timeout=10.0) as http:
        for url in run.cluster.urls:
            while True:
                tables = {t["name"]: t for t in http.get(f"{url}/v1/tables").json()["tables"]}
                age = tables["latest-invoice"].get("newest_record_age_s")
                if age is not None and age <= time.monotonic() - produced:
                    break  # a record written after the invoice was produced
                assert time.monotonic() - produced < 120, f"{url}: {tables['latest-invoice']}"
                time.sleep(0.2)
            assert tables["latest-invoice"]["last_batch_age_s"] >= 0
            metrics = http.get(f"{url}/metrics").text
            assert 'sparkiq_table_newest_record_age_seconds{table="rewards"}' in metrics
            assert 'sparkiq_table_last_batch_age_seconds{table="store-sales"}' in metrics
