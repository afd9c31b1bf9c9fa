"""Loyalty notifications: each PRIME invoice's points and its customer's new running total.

A running total per invoice, in (CreatedTime, InvoiceNumber) order within a micro-batch,
is no aggregation Spark has, so a small per-customer state computes it
(``applyInPandasWithState``, one long per customer), fed with the PRIME invoices' number,
time and points only. It runs in the routes query, whose outputs are topics rather than
tables: the tables' own query stays free of Python (`tables`). The last running total of a
customer equals its ``rewards`` total: both sum the same points.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sparkiq.dev.pos.tables import points

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.state import GroupState

NOTIFICATION_SCHEMA = (
    "CustomerCardNo string, InvoiceNumber string, CreatedTime long, PointsEarned long, "
    "TotalPoints long"
)
NOTIFICATION_COLUMNS = [c.split()[0] for c in NOTIFICATION_SCHEMA.split(", ")]
STATE_SCHEMA = "total long"


def notifications(invoices: DataFrame) -> DataFrame:
    """`NOTIFICATION_SCHEMA` rows, one per PRIME invoice of *invoices* (`valid_invoices`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    prime = invoices.where(F.col("CustomerType") == "PRIME").select(
        "CustomerCardNo", "InvoiceNumber", "CreatedTime", points(invoices).alias("PointsEarned")
    )
    return prime.groupBy("CustomerCardNo").applyInPandasWithState(
        running_totals,
        outputStructType=NOTIFICATION_SCHEMA,
        stateStructType=STATE_SCHEMA,
        outputMode="update",
        timeoutConf=GroupStateTimeout.NoTimeout,
    )


def notification_records(notes: DataFrame, topic: str) -> DataFrame:
    """*notes* (`notifications`) as (topic, key, value) records: keyed by customer card, the
    value the notification as JSON."""
    from pyspark.sql import functions as F

    return notes.select(
        F.lit(topic).alias("topic"),
        F.col("CustomerCardNo").cast("binary").alias("key"),
        F.to_json(F.struct(*NOTIFICATION_COLUMNS)).cast("binary").alias("value"),
    )


def running_totals(
    key: tuple[Any, ...], batches: Iterator[Any], state: GroupState
) -> Iterator[Any]:
    """One customer's micro-batch: its PRIME invoices in (CreatedTime, InvoiceNumber) order,
    each with the running total after it (Spark calls this once per customer and batch)."""
    import pandas as pd  # type: ignore[import-untyped]

    # Plain Python over the customer's few rows: each pandas operation costs more than the
    # whole loop.
    rows: list[tuple[int, str, int]] = []
    for part in batches:
        rows.extend(
            zip(
                part["CreatedTime"].tolist(),
                part["InvoiceNumber"].tolist(),
                part["PointsEarned"].tolist(),
                strict=True,
            )
        )
    if not rows:
        return
    rows.sort(key=lambda row: (row[0], row[1]))
    total = int(state.get[0]) if state.exists else 0
    out: dict[str, list[Any]] = {column: [] for column in NOTIFICATION_COLUMNS}
    for created, number, earned in rows:
        total += int(earned)
        out["CustomerCardNo"].append(str(key[0]))
        out["InvoiceNumber"].append(str(number))
        out["CreatedTime"].append(int(created))
        out["PointsEarned"].append(int(earned))
        out["TotalPoints"].append(total)
    state.update((total,))
    yield pd.DataFrame(out)
