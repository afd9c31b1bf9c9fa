"""The point-of-sale tables' aggregation, on batches of seeded invoices against the oracle.

The streaming query runs the same aggregation in update mode (`tests/e2e/test_pos.py` checks
it end to end, through the serving nodes); a batch gives the same groups in seconds.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sparkiq.dev.pos import pipeline as pos
from sparkiq.dev.pos.generator import InvoiceGenerator
from sparkiq.dev.pos.loyalty import with_notifications
from sparkiq.dev.pos.oracle import PosOracle, check_notifications
from sparkiq.dev.pos.tables import table_aggregates, table_records
from sparkiq.spark.materialize import define_table

pytest_plugins = ["tests.support.spark"]

START_MS = 1_763_000_000_000


def _valid(spark: Any, invoices: list[dict[str, Any]]) -> Any:
    raw = spark.createDataFrame([(json.dumps(inv).encode(),) for inv in invoices], "value binary")
    raw = raw.selectExpr(
        "cast(null as binary) key", "value", "'pos' topic", "0 partition", "0L offset"
    )
    return pos.valid_invoices(pos.parse_invoices(raw))


def _groups(spark: Any, invoices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups = table_aggregates(_valid(spark, invoices))
    return [row.asDict() for row in groups.selectExpr("*", "unix_millis(W) AS Wms").collect()]


@pytest.mark.spark
def test_every_customer_and_store_window_equals_the_oracle(spark: Any) -> None:
    invoices = list(InvoiceGenerator(11).invoices(600, start_ms=START_MS, step_ms=700))
    oracle = PosOracle.of(invoices)
    groups = _groups(spark, invoices)
    customers = {g["Id"]: g for g in groups if g["G"].startswith("C")}
    stores = {(g["Id"], g["Wms"]): g for g in groups if g["G"].startswith("S")}
    notes = {(g["Id"], g["I"]["n"]): g for g in groups if g["G"].startswith("N")}

    assert set(customers) == set(oracle.latest_invoice)
    for card, group in customers.items():
        assert group["W"] is None
        assert json.loads(group["Invoice"]) == oracle.latest_invoice[card]
        assert group["Prime"] == (card in oracle.rewards), card
        if group["Prime"]:
            assert group["TotalPoints"] == oracle.rewards[card]["TotalPoints"]
    assert stores.keys() == oracle.store_sales.keys()
    assert len({start for _, start in stores}) > 3  # several windows per store
    for window, group in stores.items():
        want = oracle.store_sales[window]
        assert (float(group["Sales"]), group["Invoices"]) == (want["Sales"], want["Invoices"])
    # One group per PRIME invoice, with the points it earns.
    assert {key: g["TotalPoints"] for key, g in notes.items()} == {
        (card, number): points
        for card, earned in oracle.earned.items()
        for number, points in earned.items()
    }


@pytest.mark.spark
def test_the_latest_invoice_is_the_newest_by_time_then_number(spark: Any) -> None:
    base = next(iter(InvoiceGenerator(5).invoices(1, start_ms=START_MS)))

    def invoice(number: str, created: int) -> dict[str, Any]:
        return {**base, "InvoiceNumber": number, "CreatedTime": created}

    invoices = [invoice("B", START_MS), invoice("C", START_MS - 1), invoice("A", START_MS)]
    (customer,) = [g for g in _groups(spark, invoices) if g["G"].startswith("C")]
    assert json.loads(customer["Invoice"])["InvoiceNumber"] == "B"


@pytest.mark.spark
def test_records_go_to_each_table_with_its_key(spark: Any) -> None:
    invoices = list(InvoiceGenerator(13).invoices(200, start_ms=START_MS, step_ms=1000))
    oracle = PosOracle.of(invoices)
    rewards = define_table("rewards", partitions=6)
    latest = define_table("latest-invoice", partitions=6)
    sales = define_table("store-sales", partitions=6, window_size="1 minute")
    records = table_records(_valid(spark, invoices), rewards, latest, sales, "loyalty")
    finished = with_notifications(records.toArrow()).to_pylist()
    by_topic: dict[str, dict[bytes, bytes]] = {}
    for r in finished:
        if r["topic"] != "loyalty":
            by_topic.setdefault(r["topic"], {})[r["key"]] = r["value"]

    assert by_topic.keys() == {rewards.topic, latest.topic, sales.topic}
    assert {k.decode(): json.loads(v) for k, v in by_topic[rewards.topic].items()} == {
        card: {"CustomerCardNo": card, "TotalPoints": reward["TotalPoints"]}
        for card, reward in oracle.rewards.items()
    }
    assert {k.decode(): json.loads(v) for k, v in by_topic[latest.topic].items()} == (
        oracle.latest_invoice
    )
    # A window's key: the store id, then the window start (8 bytes, big-endian).
    windows = {
        (k[:-8].decode(), int.from_bytes(k[-8:], "big")): json.loads(v)
        for k, v in by_topic[sales.topic].items()
    }
    assert windows == oracle.store_sales
    # The notifications of the batch, running totals included.
    notes = [json.loads(r["value"]) for r in finished if r["topic"] == "loyalty"]
    assert len(notes) == sum(len(e) for e in oracle.earned.values())
    assert check_notifications(oracle, notes) == []
