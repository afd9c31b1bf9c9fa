"""The point-of-sale tables and loyalty notifications from one Spark aggregation.

Every valid invoice becomes rows of one grouped stream (`table_rows`): one for its customer
(group ``C<card>``, no window), one for its store (group ``S<store id>`` and the 1-minute
window of its CreatedTime) and, for a PRIME invoice, one of its own (group ``N<card>``, its
window and its (CreatedTime, InvoiceNumber) as ``I``). One streaming aggregation
(`table_aggregates`, update mode: each micro-batch emits the groups it changed) keeps, per
group:

- customer: the sum of the points its PRIME invoices earn (``floor(TotalAmount / 50)``),
  whether it ever had one, and the invoice with the greatest (CreatedTime, InvoiceNumber),
  as received (``max_by``);
- store window: the exact decimal sum of TotalAmount and the invoice count;
- PRIME invoice: the points it earns. Its group is new in the micro-batch the invoice
  arrives in, so the batch's output holds every PRIME invoice it read, next to its
  customer's total after the batch: what a notification needs (`loyalty`).

`table_records` turns the changed groups into records: a customer's ``latest-invoice`` (and
its ``rewards`` total when it is a PRIME customer), a store window's ``store-sales``, and a
PRIME invoice's notification on the loyalty topic, whose value (the running total after the
invoice) `loyalty.with_notifications` fills in once the micro-batch is collected.

The store windows' and PRIME invoices' event time carries a watermark `LATENESS` behind the
newest invoice seen: a window older than that leaves Spark's state, and an invoice for it
comes too late and is left out of the store's sales and of the notifications (its points
still count in ``rewards``), so the state stays bounded for a pipeline that runs for months
(the table keeps its windows for its own retention). Customers have no window and stay.

Why one native aggregation: Spark computes it in the JVM with its state in RocksDB, where a
Python state function (``applyInPandasWithState``) costs a round trip through a Python
worker and Arrow every micro-batch, ~65 ms more at 50 invoices/s on two cores, and the
invoice text crossing into Python and back (`benchmarks/bench_pipeline_stages.py`).
Spark takes one aggregation per query in update mode, hence one grouping for customers,
store windows and invoices. The notifications need a running total per invoice, which no
aggregation gives, but each is the customer's total after the batch less the points of its
invoices that come after it in the batch: computed from this query's output, they need
neither a state of their own nor a read of the invoices of their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from sparkiq.core.tables import TableDef

POINTS_PER = 50  # one loyalty point per 50 of invoice total, rounded down
WINDOW_MS = 60_000  # store-sales windows: 1 minute of CreatedTime
LATENESS = "10 minutes"  # store windows this much older than the newest invoice are closed
CUSTOMER, STORE, NOTE = "C", "S", "N"  # the first letter of a group key
NOTE_TYPE = "struct<card: string, t: long, n: string, earned: long, total: long>"
_ORDER_TYPE = "struct<t: long, n: string>"


def points(invoices: DataFrame) -> Column:
    """The loyalty points each invoice of *invoices* earns (0 unless PRIME)."""
    from pyspark.sql import functions as F

    earned = F.floor(invoices["TotalAmount"] / POINTS_PER)
    return F.when(invoices["CustomerType"] == "PRIME", earned).otherwise(0).cast("long")


def table_rows(invoices: DataFrame) -> DataFrame:
    """The rows of *invoices* (`pipeline.valid_invoices`) grouped by ``G``, ``W`` (the window
    start; null for customers) and ``I`` (a PRIME invoice's (t, n); null for the others):
    its customer's, its store window's and, for a PRIME invoice, its own."""
    from pyspark.sql import functions as F

    null = F.lit(None)
    created = F.col("CreatedTime")
    start = F.timestamp_millis(created - F.pmod(created, F.lit(WINDOW_MS)))
    order = F.struct(created.alias("t"), F.col("InvoiceNumber").alias("n"))
    customer = F.struct(
        F.concat(F.lit(CUSTOMER), "CustomerCardNo").alias("G"),
        null.cast("timestamp").alias("W"),
        null.cast(_ORDER_TYPE).alias("I"),
        points(invoices).alias("Points"),
        (F.col("CustomerType") == "PRIME").alias("Prime"),
        F.col("value").alias("Invoice"),
        order.alias("Order"),
        null.cast("decimal(12,2)").alias("Amount"),
    )
    store = F.struct(
        F.concat(F.lit(STORE), "StoreID").alias("G"),
        start.alias("W"),
        null.cast(_ORDER_TYPE).alias("I"),
        null.cast("long").alias("Points"),
        null.cast("boolean").alias("Prime"),
        null.cast("binary").alias("Invoice"),
        null.cast(_ORDER_TYPE).alias("Order"),
        F.col("TotalAmount").cast("decimal(12,2)").alias("Amount"),
    )
    note = F.struct(
        F.concat(F.lit(NOTE), "CustomerCardNo").alias("G"),
        start.alias("W"),
        order.alias("I"),
        points(invoices).alias("Points"),
        null.cast("boolean").alias("Prime"),
        null.cast("binary").alias("Invoice"),
        null.cast(_ORDER_TYPE).alias("Order"),
        null.cast("decimal(12,2)").alias("Amount"),
    )
    rows = F.when(F.col("CustomerType") == "PRIME", F.array(customer, store, note)).otherwise(
        F.array(customer, store)
    )
    return invoices.select(F.explode(rows).alias("r")).select("r.*")


def table_aggregates(invoices: DataFrame) -> DataFrame:
    """Per customer, store window and PRIME invoice of *invoices*: ``Id`` (card or store
    id), ``G``, ``W``, ``I``, ``TotalPoints``, ``Prime``, ``Invoice`` (the latest), ``Sales``
    and ``Invoices``."""
    from pyspark.sql import functions as F

    rows = table_rows(invoices)
    if invoices.isStreaming:
        rows = rows.withWatermark("W", LATENESS)
    return (
        rows.groupBy("G", "W", "I")
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
    invoices: DataFrame, rewards: TableDef, latest: TableDef, sales: TableDef, loyalty: str
) -> DataFrame:
    """The records (topic, key, value, note) of the three tables and the *loyalty* topic for
    *invoices*. ``note`` (`NOTE_TYPE`) is what `loyalty.with_notifications` needs: on a
    notification (value null until then) the card, (t, n) and points earned, on a rewards
    record the card and its total; null on the others."""
    from pyspark.sql import functions as F

    from sparkiq.spark.materialize import changelog_columns

    groups = table_aggregates(invoices)
    null = F.lit(None)
    reward = _record(
        rewards.topic,
        *changelog_columns(
            groups,
            rewards,
            key="Id",
            value=F.struct(F.col("Id").alias("CustomerCardNo"), "TotalPoints"),
        ),
        note=_note(total=F.col("TotalPoints")),
    )
    newest = _record(latest.topic, *changelog_columns(groups, latest, key="Id", value="Invoice"))
    window = _record(
        sales.topic,
        *changelog_columns(
            groups,
            sales,
            key="Id",
            value=F.struct("Sales", "Invoices"),
            window=F.struct(F.col("W").alias("start")),
        ),
    )
    customer = F.when(F.col("Prime"), F.array(newest, reward)).otherwise(F.array(newest))
    kind = F.substring("G", 1, 1)
    earned = _note(t=F.col("I.t"), n=F.col("I.n"), earned=F.col("TotalPoints"))
    notice = _record(loyalty, F.col("Id").cast("binary"), null.cast("binary"), note=earned)
    out = (
        F.when(kind == STORE, F.array(window))
        .when(kind == NOTE, F.array(notice))
        .otherwise(customer)
    )
    return groups.select(F.explode(out).alias("r")).select("r.topic", "r.key", "r.value", "r.note")


def _note(
    *,
    t: Column | None = None,
    n: Column | None = None,
    earned: Column | None = None,
    total: Column | None = None,
) -> Column:
    """A group's `NOTE_TYPE` struct: its card (``Id``) and the fields given, the rest null."""
    from pyspark.sql import functions as F

    def field(column: Column | None, kind: str, name: str) -> Column:
        return (F.lit(None).cast(kind) if column is None else column).alias(name)

    return F.struct(
        F.col("Id").alias("card"),
        field(t, "long", "t"),
        field(n, "string", "n"),
        field(earned, "long", "earned"),
        field(total, "long", "total"),
    )


def _record(topic: str, key: Column, value: Column, note: Column | None = None) -> Column:
    from pyspark.sql import functions as F

    return F.struct(
        F.lit(topic).alias("topic"),
        key.alias("key"),
        value.alias("value"),
        (F.lit(None).cast(NOTE_TYPE) if note is None else note).alias("note"),
    )
