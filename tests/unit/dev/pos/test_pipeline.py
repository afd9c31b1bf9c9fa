"""The point-of-sale pipeline's parts: invoice parsing and the per-customer state.

The whole pipeline is checked against the oracle in `tests/e2e/test_pos.py`; these tests pin the
pieces whose mistakes would be slow or subtle there: which reason a bad record gets, that
each invoice is parsed once per query, and what the customer state emits batch by batch.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd  # type: ignore[import-untyped]

from sparkiq.dev.pos import pipeline as pos
from sparkiq.dev.pos.generator import InvoiceGenerator
from sparkiq.dev.pos.oracle import PosOracle

pytest_plugins = ["tests.support.spark"]

GOOD: dict[str, Any] = next(iter(InvoiceGenerator(3).invoices(1, start_ms=0)))


def _with(**fields: Any) -> bytes:
    return json.dumps({**GOOD, **fields}).encode()


REASONS: list[tuple[bytes | None, str | None]] = [
    (json.dumps(GOOD).encode(), None),
    (None, "empty value"),
    (b"", "not a JSON document"),
    (b'{"InvoiceNumber": 17,', "not a JSON document"),
    (b"abc", "not a JSON document"),
    (b"[1,2]", "missing or invalid field InvoiceNumber"),
    (b"{}", "missing or invalid field InvoiceNumber"),
    (_with(CreatedTime="yesterday"), "missing or invalid field CreatedTime"),
    (_with(TotalAmount="a lot"), "missing or invalid field TotalAmount"),
    (_with(StoreID=None), "missing or invalid field StoreID"),
    (_with(InvoiceLineItems="none"), "missing or invalid field InvoiceLineItems"),
    (_with(InvoiceLineItems=[]), "no line items"),
    (_with(NumberOfItems="many"), None),  # not a field the pipeline needs
]


def _raw(spark: Any, values: list[bytes | None]) -> Any:
    df = spark.createDataFrame([(v,) for v in values], "value binary")
    return df.selectExpr(
        "cast(null as binary) key", "value", "'pos' topic", "0 partition", "0L offset"
    )


def test_each_bad_record_gets_the_reason_that_names_what_is_wrong(spark: Any) -> None:
    values = [value for value, _ in REASONS]
    rows = pos.parse_invoices(_raw(spark, values)).select("reason").collect()
    assert [row.reason for row in rows] == [reason for _, reason in REASONS]


def test_each_invoice_is_parsed_once_when_the_valid_ones_are_kept(spark: Any) -> None:
    invoices = pos.parse_invoices(_raw(spark, [json.dumps(GOOD).encode()]))
    kept = invoices.where("reason is null").select("inv.*")
    plan = kept._jdf.queryExecution().executedPlan().toString()
    assert plan.count("from_json(") == 1, plan
    assert kept.count() == 1


def test_store_sales_sums_each_store_and_minute_as_the_oracle_does(spark: Any) -> None:
    # Two hours of invoices, every ~40 s: many stores share a minute, a bad record none.
    invoices = list(InvoiceGenerator(5).invoices(180, start_ms=1_700_000_000_000, step_ms=40_000))
    values: list[bytes | None] = [json.dumps(inv).encode() for inv in invoices]
    values.append(_with(InvoiceLineItems=[]))
    sales = pos.store_sales(pos.valid_invoices(pos.parse_invoices(_raw(spark, values))))
    got = {
        (row.StoreID, int(row.window.start.timestamp() * 1000)): {
            "Sales": float(row.Sales),
            "Invoices": row.Invoices,
        }
        for row in sales.collect()
    }
    assert got == PosOracle.of(invoices).store_sales


class FakeState:
    """The part of Spark's GroupState the customer function uses (a pure unit test)."""

    def __init__(self) -> None:
        self.value: tuple[Any, ...] | None = None

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self) -> tuple[Any, ...]:
        assert self.value is not None
        return self.value

    def update(self, value: tuple[Any, ...]) -> None:
        self.value = value


def _invoices(card: str, kind: str, rows: list[tuple[int, str, int]]) -> pd.DataFrame:
    """(created, number, points) rows as the customer query's input frame."""
    return pd.DataFrame(
        {
            "CustomerCardNo": [card] * len(rows),
            "CustomerType": [kind] * len(rows),
            "InvoiceNumber": [number for _, number, _ in rows],
            "CreatedTime": [created for created, _, _ in rows],
            "PointsEarned": [points if kind == "PRIME" else 0 for _, _, points in rows],
            "Invoice": [f'{{"n": "{number}"}}' for _, number, _ in rows],
        }
    )


def _run(state: FakeState, frame: pd.DataFrame) -> list[dict[str, Any]]:
    card = str(frame["CustomerCardNo"].iloc[0])
    out = list(pos._customer_updates((card,), iter([frame]), state))  # type: ignore[arg-type]
    if not out:
        return []
    rows: list[dict[str, Any]] = out[0].to_dict("records")
    assert list(out[0].columns) == pos.CUSTOMER_UPDATE_COLUMNS
    return [{k: v for k, v in row.items() if not pd.isna(v)} for row in rows]


def test_prime_points_run_on_in_time_order_and_the_newest_invoice_wins() -> None:
    state = FakeState()
    # Out of order within the batch: the state sorts by (time, number).
    first = _run(state, _invoices("C1", "PRIME", [(20, "B", 3), (10, "A", 2)]))
    assert first == [
        {"Kind": "notification", "CustomerCardNo": "C1", "InvoiceNumber": "A",
         "CreatedTime": 10, "PointsEarned": 2, "TotalPoints": 2},
        {"Kind": "notification", "CustomerCardNo": "C1", "InvoiceNumber": "B",
         "CreatedTime": 20, "PointsEarned": 3, "TotalPoints": 5},
        {"Kind": "reward", "CustomerCardNo": "C1", "TotalPoints": 5},
        {"Kind": "latest", "CustomerCardNo": "C1", "Invoice": '{"n": "B"}'},
    ]  # fmt: skip
    assert state.get == (5, 20, "B")
    # A later batch with an older invoice: points go on, the latest invoice stays.
    second = _run(state, _invoices("C1", "PRIME", [(15, "C", 4)]))
    assert [row["Kind"] for row in second] == ["notification", "reward"]
    assert second[0]["TotalPoints"] == 9
    assert state.get == (9, 20, "B")


def test_other_customers_get_only_their_latest_invoice() -> None:
    state = FakeState()
    rows = _run(state, _invoices("C2", "NONPRIME", [(10, "A", 7), (10, "B", 7)]))
    assert rows == [{"Kind": "latest", "CustomerCardNo": "C2", "Invoice": '{"n": "B"}'}]
    assert state.get == (0, 10, "B")
    assert _run(state, _invoices("C2", "NONPRIME", [(5, "Z", 1)])) == []
