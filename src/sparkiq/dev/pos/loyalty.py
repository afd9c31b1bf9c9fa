"""Loyalty notifications: each PRIME invoice's points and its customer's new running total.

A running total per invoice, in (CreatedTime, InvoiceNumber) order within a micro-batch, is
no aggregation Spark has. The tables' query (`tables.table_records` with a loyalty topic)
emits, per micro-batch, a record for every PRIME invoice it read (its card, (CreatedTime,
InvoiceNumber) and points earned, the value still empty) beside the ``rewards`` record of
each customer it changed (the total after the batch). `with_notifications` runs on those
rows once they are collected on the driver (`PipelineContext.write`'s ``finish``): going
through a customer's invoices of the batch newest first, each one's running total is the
total after the batch less the points of the invoices after it. So the notifications need
no state and no read of the invoices of their own (a per-customer Python state,
``applyInPandasWithState``, in the routes' query did this before, and cost that query a
second read of every invoice: `benchmarks/bench_pipeline.py`), and the last running total
of a customer equals its ``rewards`` total: both sum the same points.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    import pyarrow as pa

NOTIFICATION_COLUMNS = [
    "CustomerCardNo",
    "InvoiceNumber",
    "CreatedTime",
    "PointsEarned",
    "TotalPoints",
]


def with_notifications(records: pa.Table) -> pa.Table:
    """*records* (topic, key, value, note[, partition]: `tables.table_records` of one
    micro-batch) with each notification's value filled in and without ``note``.

    Raises ValueError for a notification whose customer has no total in the batch: the
    aggregation emits a customer's total with each of its invoices, so that would be a bug.
    """
    import pyarrow as pa

    notes: list[dict[str, Any] | None] = records.column("note").to_pylist()
    values: list[bytes | None] = records.column("value").to_pylist()
    totals: dict[str, int] = {}
    earned: dict[str, list[tuple[int, str, int, int]]] = defaultdict(list)
    for i, note in enumerate(notes):
        if note is None:
            continue
        if note["total"] is not None:
            totals[note["card"]] = int(note["total"])
        elif note["earned"] is not None:
            earned[note["card"]].append((int(note["t"]), str(note["n"]), int(note["earned"]), i))
    for card, invoices in earned.items():
        total = totals.get(card)
        if total is None:
            raise ValueError(
                f"customer {card}: {len(invoices)} notifications in a micro-batch without "
                "the customer's total"
            )
        for created, number, gained, i in sorted(invoices, reverse=True):  # newest first
            values[i] = orjson.dumps(
                {
                    "CustomerCardNo": card,
                    "InvoiceNumber": number,
                    "CreatedTime": created,
                    "PointsEarned": gained,
                    "TotalPoints": total,
                }
            )
            total -= gained
    out = records.drop_columns(["note"])
    return out.set_column(
        out.schema.get_field_index("value"), "value", pa.array(values, pa.binary())
    )
