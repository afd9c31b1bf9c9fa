"""The point-of-sale pipeline's parts: invoice parsing and the tables' state.

The whole pipeline is checked against the oracle in `tests/e2e/test_pos.py`; these tests pin the
pieces whose mistakes would be slow or subtle there: which reason a bad record gets, that
each invoice is parsed once per query, and what the customer and store states emit batch
by batch.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd  # type: ignore[import-untyped]

from sparkiq.core.partitioner import partition_for
from sparkiq.dev.pos import pipeline as pos
from sparkiq.dev.pos import tablestate
from sparkiq.dev.pos.generator import InvoiceGenerator

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


class FakeState:
    """The part of Spark's GroupState the state functions use (a pure unit test)."""

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


def _rows(out: list[pd.DataFrame]) -> list[dict[str, Any]]:
    if not out:
        return []
    assert len(out) == 1
    assert list(out[0].columns) == tablestate.UPDATE_COLUMNS
    rows: list[dict[str, Any]] = out[0].to_dict("records")
    return [{k: v for k, v in row.items() if not pd.isna(v)} for row in rows]


def _invoices(card: str, kind: str, rows: list[tuple[int, str, int]]) -> pd.DataFrame:
    """(created, number, points) rows as `state_rows` makes a customer's."""
    return pd.DataFrame(
        {
            "G": [f"C{card}"] * len(rows),
            "CustomerType": [kind] * len(rows),
            "InvoiceNumber": [number for _, number, _ in rows],
            "CreatedTime": [created for created, _, _ in rows],
            "PointsEarned": [points if kind == "PRIME" else 0 for _, _, points in rows],
            "Invoice": [f'{{"n": "{number}"}}' for _, number, _ in rows],
            "WindowStart": [None] * len(rows),
            "Cents": [None] * len(rows),
        }
    )


def _run(state: FakeState, frame: pd.DataFrame) -> list[dict[str, Any]]:
    key = (str(frame["G"].iloc[0]),)
    out = tablestate.update(key, iter([frame]), state, sales_partitions=6)  # type: ignore[arg-type]
    return _rows(list(out))


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
    assert state.get == (5, 20, "B", None)
    # A later batch with an older invoice: points go on, the latest invoice stays.
    second = _run(state, _invoices("C1", "PRIME", [(15, "C", 4)]))
    assert [row["Kind"] for row in second] == ["notification", "reward"]
    assert second[0]["TotalPoints"] == 9
    assert state.get == (9, 20, "B", None)


def test_other_customers_get_only_their_latest_invoice() -> None:
    state = FakeState()
    rows = _run(state, _invoices("C2", "NONPRIME", [(10, "A", 7), (10, "B", 7)]))
    assert rows == [{"Kind": "latest", "CustomerCardNo": "C2", "Invoice": '{"n": "B"}'}]
    assert state.get == (0, 10, "B", None)
    assert _run(state, _invoices("C2", "NONPRIME", [(5, "Z", 1)])) == []


def _store_rows(store: str, rows: list[tuple[int, int]]) -> pd.DataFrame:
    """(window start, cents) rows as `state_rows` makes a store's."""
    return pd.DataFrame(
        {
            "G": [f"S{store}"] * len(rows),
            "CustomerType": [None] * len(rows),
            "InvoiceNumber": [None] * len(rows),
            "CreatedTime": [None] * len(rows),
            "PointsEarned": [None] * len(rows),
            "Invoice": [None] * len(rows),
            "WindowStart": [start for start, _ in rows],
            "Cents": [cents for _, cents in rows],
        }
    )


def _sales(rows: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    assert all(row["Kind"] == "sales" and row["StoreID"] == "STR1" for row in rows)
    # Every window of the store in the partition a lookup of the store goes to.
    assert {row["Partition"] for row in rows} <= {partition_for(b"STR1", 6)}
    return [(row["WindowStart"], row["Cents"], row["Invoices"]) for row in rows]


def test_a_store_sums_each_window_across_batches_and_closes_old_ones() -> None:
    minute, late = tablestate.WINDOW_MS, tablestate.LATENESS_MS
    state = FakeState()
    first = _run(state, _store_rows("STR1", [(0, 150), (minute, 1), (0, 50)]))
    assert _sales(first) == [(0, 200, 2), (minute, 1, 1)]
    assert tablestate.decode_windows(state.get[3]) == {0: (200, 2), minute: (1, 1)}
    # Later: window 0 goes on; a window past the lateness makes window 0 closed (dropped
    # from the state) once it is older than the newest by more than the lateness.
    newest = late + 2 * minute
    second = _run(state, _store_rows("STR1", [(0, 5), (newest, 7)]))
    assert _sales(second) == [(0, 205, 3), (newest, 7, 1)]
    assert tablestate.decode_windows(state.get[3]) == {newest: (7, 1)}
    # An invoice of a closed window is left out; nothing changed, nothing emitted.
    assert _run(state, _store_rows("STR1", [(minute, 9)])) == []
    assert tablestate.decode_windows(state.get[3]) == {newest: (7, 1)}


def test_the_windows_state_round_trips() -> None:
    windows = {120_000: (5, 1), 0: (12_345_678_901, 42)}
    assert tablestate.decode_windows(tablestate.encode_windows(windows)) == windows
    assert tablestate.decode_windows(None) == {} == tablestate.decode_windows("")
