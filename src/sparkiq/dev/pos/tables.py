"""The point-of-sale tables from one Spark aggregation (no Python in the micro-batch).

Every valid invoice becomes two rows of one grouped stream (`table_rows`): one for its
customer (group ``C<card>``, no window) and one for its store (group ``S<store id>`` and the
1-minute window of its CreatedTime). One streaming aggregation (`table_aggregates`, update
mode: each micro-batch emits the groups it changed) keeps, per group:

- customer: the sum of the points its PRIME invoices earn (``floor(TotalAmount / 50)``),
  whether it ever had one, and the invoice with the greatest (CreatedTime, InvoiceNumber),
  as received (``max_by``);
- store window: the exact decimal sum of TotalAmount and the invoice count.

`table_records` turns the changed groups into changelog records: a customer's
``latest-invoice`` (and its ``rewards`` total when it is a PRIME customer), a store
window's ``store-sales``.

The store windows' event time carries a watermark `LATENESS` behind the newest invoice
seen: a window older than that leaves Spark's state, and an invoice for it comes too late
and is left out, so the state stays bounded for a pipeline that runs for months (the
table keeps its windows for its own retention). Customers have no window and stay.

Why one native aggregation: Spark computes it in the JVM with its state in RocksDB, where a
Python state function (``applyInPandasWithState``) costs a round trip through a Python
worker and Arrow every micro-batch, ~65 ms more at 50 invoices/s on two cores, and the
invoice text crossing into Python and back (`benchmarks/bench_pipeline_stages.py`).
Spark takes one aggregation per query in update mode, hence one grouping for customers
and store windows. The loyalty notifications, which need a running total per invoice in
time order, come from a small Python state in the routes query (`loyalty`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from sparkiq.core.tables import TableDef

POINTS_PER = 50  # one loyalty point per 50 of invoice total, rounded down
WINDOW_MS = 60_000  # store-sales windows: 1 minute of CreatedTime
LATENESS = "10 minutes"  # store windows this much older than the newest invoice are closed
CUSTOMER, STORE = "C", "S"  # the first letter of a group key


def points(invoices: DataFrame) -> Column:
    """The loyalty points each invoice of *invoices* earns (0 unless PRIME)."""
    from pyspark.sql import functions as F

    earned = F.floor(invoices["TotalAmount"] / POINTS_PER)
    return F.when(invoices["CustomerType"] == "PRIME", earned).otherwise(0).cast("long")


def table_rows(invoices: DataFrame) -> DataFrame:
    """Two rows per invoice of *invoices* (`pipeline.valid_invoices`): its customer's and its
    store window's, grouped by ``G`` and ``W`` (the window start; null for customers)."""
    from pyspark.sql import functions as F

    null = F.lit(None)
    created = F.col("CreatedTime")
    start = F.timestamp_millis(created - F.pmod(created, F.lit(WINDOW_MS)))
    customer = F.struct(
        F.concat(F.lit(CUSTOMER), "CustomerCardNo").alias("G"),
        null.cast("timestamp").alias("W"),
        points(invoices).alias("Points"),
        (F.col("CustomerType") == "PRIME").alias("Prime"),
        F.col("value").alias("Invoice"),
        F.struct(created.alias("t"), F.col("InvoiceNumber").alias("n")).alias("Order"),
        null.cast("decimal(12,2)").alias("Amount"),
    )
    store = F.struct(
        F.concat(F.lit(STORE), "StoreID").alias("G"),
        start.alias("W"),
        null.cast("long").alias("Points"),
        null.cast("boolean").alias("Prime"),
        null.cast("binary").alias("Invoice"),
        null.cast("struct<t: long, n: string>").alias("Order"),
        F.col("TotalAmount").cast("decimal(12,2)").alias("Amount"),
    )
    return invoices.select(F.explode(F.array(customer, store)).alias("r")).select("r.*")


def table_aggregates(invoices: DataFrame) -> DataFrame:
    """Per customer and per store window of *invoices*: ``Id`` (card or store id), ``W``,
    ``TotalPoints``, ``Prime``, ``Invoice`` (the latest), ``Sales`` and ``Invoices``."""
    from pyspark.sql import functions as F

    rows = table_rows(invoices)
    if invoices.isStreaming:
        rows = rows.withWatermark("W", LATENESS)
    return (
        rows.groupBy("G", "W")
        .agg(
            F.sum("Points").alias("TotalPoints"),
            F.max("Prime").alias("Prime"),
            F.max_by("Invoice", "Order").alias("Invoice"),
            F.sum("Amount").alias("Sales"),
            F.count("Amount").alias("Invoices"),
        )
        .select(F.expr("substring(G, 2)").alias("Id"), "*")
    )


def table_records(
    invoices: DataFrame, rewards: TableDef, latest: TableDef, sales: TableDef
) -> DataFrame:
    """The changelog records (topic, key, value) of the three tables for *invoices*."""
    from pyspark.sql import functions as F

    from sparkiq.spark.materialize import changelog_columns

    groups = table_aggregates(invoices)
    reward = _record(
        rewards,
        *changelog_columns(
            groups,
            rewards,
            key="Id",
            value=F.struct(F.col("Id").alias("CustomerCardNo"), "TotalPoints"),
        ),
    )
    newest = _record(latest, *changelog_columns(groups, latest, key="Id", value="Invoice"))
    window = _record(
        sales,
        *changelog_columns(
            groups,
            sales,
            key="Id",
            value=F.struct("Sales", "Invoices"),
            window=F.struct(F.col("W").alias("start")),
        ),
    )
    customer = F.when(F.col("Prime"), F.array(newest, reward)).otherwise(F.array(newest))
    out = F.when(F.col("G").startswith(STORE), F.array(window)).otherwise(customer)
    return groups.select(F.explode(out).alias("r")).select("r.topic", "r.key", "r.value")


def _record(table: TableDef, key: Column, value: Column) -> Column:
    from pyspark.sql import functions as F

    return F.struct(F.lit(table.topic).alias("topic"), key.alias("key"), value.alias("value"))
