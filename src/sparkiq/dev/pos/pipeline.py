"""The retail point-of-sale pipeline: sparkiq's example and the demo's data pipeline.

Run it with ``sparkiq run src/sparkiq/dev/pos/pipeline.py --bootstrap-servers HOST:PORT``.

Invoices (JSON, keyed by store id) arrive on ``pos``. Each query parses each invoice once
(`parse_invoices`). Three streaming queries:

- ``pos-routes`` (stateless, one pass over each micro-batch): a record whose value does not
  parse as an invoice goes to ``pos-dead-letter`` with the reason and its source position,
  and is counted (observed metric ``dead_letters``); HOME-DELIVERY invoices go to
  ``shipments`` as received; every invoice is masked (no card number, no contact number)
  and flattened to one record per line item on ``hadoop-sink``.
- ``customers``: Spark groups the invoices by customer card (a shuffle: one customer's
  invoices arrive on many store partitions) and keeps one state per customer
  (`applyInPandasWithState`) for two tables. PRIME customers' invoices earn
  ``floor(TotalAmount / 50)`` points: each becomes a notification on ``loyalty`` carrying
  the points earned and the new running total, and the last total of each micro-batch
  updates the table ``rewards`` (customer -> total points). The table ``latest-invoice``
  gets customer -> the invoice with the greatest (CreatedTime, InvoiceNumber), as received.
- table ``store-sales``, windowed: store -> sales per 1-minute window of CreatedTime
  (exact decimal sum and invoice count), each window kept an hour after the store's newest.

Before them, the global table ``stores`` (store id -> name, city, state: reference data
every node holds whole) is written once from `store_directory`.

One state for both customer tables instead of a query each: every query reads and parses
the whole input and has a fixed cost per micro-batch, which on a small machine is most of
a table's freshness. Merging further would not read the input fewer times: Spark refuses an
``applyInPandasWithState`` in update mode and an aggregation in one query, and a stateless
branch unioned into a stateful query still gets a scan of its own
(`benchmarks/bench_pipeline_stages.py` measures each stage alone).

`sparkiq.dev.pos.oracle` computes every output of this file in plain Python; the end-to-end
tests compare the two.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sparkiq.dev.pos.generator import DEFAULT_STORES, store_directory
from sparkiq.spark.materialize import changelog_columns, define_table

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.streaming.state import GroupState

    from sparkiq.spark.pipeline import PipelineContext

POINTS_PER = 50  # one loyalty point per 50 of invoice total, rounded down
WINDOW = "1 minute"
RETENTION = "1 hour"  # store-sales windows are kept this long after the newest one ends
DEFAULT_TOPICS = {
    "source": "pos",
    "shipments": "shipments",
    "loyalty": "loyalty",
    "hadoop": "hadoop-sink",
    "dead_letter": "pos-dead-letter",
}
REQUIRED = (
    "InvoiceNumber",
    "CreatedTime",
    "StoreID",
    "CustomerType",
    "CustomerCardNo",
    "TotalAmount",
    "DeliveryType",
    "InvoiceLineItems",
)
INVOICE_SCHEMA = (
    "InvoiceNumber string, CreatedTime long, StoreID string, PosID string, "
    "CashierID string, CustomerType string, CustomerCardNo string, "
    "TotalAmount decimal(12,2), NumberOfItems int, PaymentMethod string, "
    "TaxableAmount decimal(12,2), CGST decimal(12,2), SGST decimal(12,2), "
    "CESS decimal(12,2), DeliveryType string, "
    "DeliveryAddress struct<AddressLine: string, City: string, State: string, "
    "PinCode: string, ContactNumber: string>, "
    "InvoiceLineItems array<struct<ItemCode: string, ItemDescription: string, "
    "ItemPrice: decimal(12,2), ItemQty: int, TotalValue: decimal(12,2)>>"
)
# What the per-customer state emits: one row per loyalty notification, `rewards` record and
# `latest-invoice` record, told apart by Kind.
NOTIFICATION, REWARD, LATEST = "notification", "reward", "latest"
CUSTOMER_UPDATE_SCHEMA = (
    "Kind string, CustomerCardNo string, InvoiceNumber string, CreatedTime long, "
    "PointsEarned long, TotalPoints long, Invoice string"
)
CUSTOMER_UPDATE_COLUMNS = [c.split()[0] for c in CUSTOMER_UPDATE_SCHEMA.split(", ")]
CUSTOMER_STATE_SCHEMA = "total long, latest_time long, latest_number string"


def parse_invoices(raw: DataFrame) -> DataFrame:
    """*raw* Kafka rows plus ``inv`` (the parsed invoice) and ``reason`` (null when valid).

    Each value is parsed once. ``inv`` comes out of a generator (`explode` of a one-element
    array) rather than a projection on purpose: a filter on ``reason`` (every query keeps the
    valid invoices only) is pushed by Spark's optimizer below a projection, and it would copy
    `from_json` into each of the reason's conditions, parsing every invoice ~18 times per
    query (seen in the physical plan); a filter on a generator's output stays above it.
    """
    from pyspark.sql import functions as F

    text = F.col("value").cast("string")
    parsed = raw.select(
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        text.alias("text"),
        F.explode(F.array(F.from_json(text, INVOICE_SCHEMA, {"mode": "PERMISSIVE"}))).alias("inv"),
    )
    inv = F.col("inv")
    complete: Column = inv.isNotNull() & (F.size("inv.InvoiceLineItems") > 0)
    for name in REQUIRED:
        complete = complete & inv[name].isNotNull()
    # The first condition that holds decides; valid invoices (nearly all) stop at the second,
    # so the text is parsed a second time only to name what is wrong with a bad one.
    reason: Column = (
        F.when(F.col("value").isNull(), F.lit("empty value"))
        .when(complete, F.lit(None).cast("string"))
        .when(F.get_json_object(F.col("text"), "$").isNull(), F.lit("not a JSON document"))
    )
    for name in REQUIRED:
        reason = reason.when(
            inv.isNull() | inv[name].isNull(), F.lit(f"missing or invalid field {name}")
        )
    reason = reason.when(F.size("inv.InvoiceLineItems") == 0, F.lit("no line items"))
    return parsed.withColumn("reason", reason)


def valid_invoices(parsed: DataFrame) -> DataFrame:
    """The invoices of *parsed* (`parse_invoices`) that are valid: ``value`` plus their fields."""
    from pyspark.sql import functions as F

    return parsed.where(F.col("reason").isNull()).select("value", "inv.*")


def store_sales(invoices: DataFrame) -> DataFrame:
    """Sales (exact sum) and invoice count per store and 1-minute window of CreatedTime."""
    from pyspark.sql import functions as F

    return (
        invoices.withColumn("ts", F.timestamp_millis("CreatedTime"))
        .withWatermark("ts", "10 minutes")
        .groupBy("StoreID", F.window("ts", WINDOW))
        .agg(F.sum("TotalAmount").alias("Sales"), F.count(F.lit(1)).alias("Invoices"))
    )


def _routes(parsed: DataFrame, topics: dict[str, str]) -> DataFrame:
    """Dead letters, shipments and flattened line items as (topic, key, value) rows."""
    from pyspark.sql import functions as F

    bad = F.col("reason").isNotNull()
    dead = F.struct(
        F.lit(topics["dead_letter"]).alias("topic"),
        F.col("key"),
        F.to_json(
            F.struct(
                F.col("reason"),
                F.col("topic").alias("source_topic"),
                F.col("partition").alias("source_partition"),
                F.col("offset").alias("source_offset"),
                F.col("text").alias("value"),
            )
        )
        .cast("binary")
        .alias("value"),
    )
    shipment = F.struct(F.lit(topics["shipments"]).alias("topic"), F.col("key"), F.col("value"))
    inv = F.col("inv")

    def line(item: Column) -> Column:
        return F.struct(
            F.lit(topics["hadoop"]).alias("topic"),
            inv.InvoiceNumber.cast("binary").alias("key"),
            F.to_json(
                F.struct(
                    inv.InvoiceNumber.alias("InvoiceNumber"),
                    inv.CreatedTime.alias("CreatedTime"),
                    inv.StoreID.alias("StoreID"),
                    inv.PosID.alias("PosID"),
                    inv.CustomerType.alias("CustomerType"),
                    inv.PaymentMethod.alias("PaymentMethod"),
                    inv.DeliveryType.alias("DeliveryType"),
                    inv.DeliveryAddress.City.alias("City"),
                    inv.DeliveryAddress.State.alias("State"),
                    inv.DeliveryAddress.PinCode.alias("PinCode"),
                    item.ItemCode.alias("ItemCode"),
                    item.ItemDescription.alias("ItemDescription"),
                    item.ItemPrice.alias("ItemPrice"),
                    item.ItemQty.alias("ItemQty"),
                    item.TotalValue.alias("TotalValue"),
                )
            )
            .cast("binary")
            .alias("value"),
        )

    empty = F.array().cast("array<struct<topic: string, key: binary, value: binary>>")
    out = F.when(bad, F.array(dead)).otherwise(
        F.concat(
            F.when(inv.DeliveryType == "HOME-DELIVERY", F.array(shipment)).otherwise(empty),
            F.transform(inv.InvoiceLineItems, line),
        )
    )
    return parsed.select(F.explode(out).alias("r")).select("r.topic", "r.key", "r.value")


def _customer_updates(
    key: tuple[Any, ...], batches: Iterator[Any], state: GroupState
) -> Iterator[Any]:
    """Per customer and micro-batch: loyalty notifications, the new total, the latest invoice.

    The state is the customer's point total and the (CreatedTime, InvoiceNumber) of the
    newest invoice seen. PRIME invoices earn points in (time, number) order, each one a
    notification carrying the running total; the batch's last total is one ``rewards`` row.
    The newest invoice of the batch is one ``latest`` row when it is newer than the one
    already in the table.
    """
    import pandas as pd  # type: ignore[import-untyped]

    # Plain Python over the group's few rows: each pandas operation costs more than the
    # whole loop here, and Spark calls this once per customer per micro-batch.
    rows: list[tuple[int, str, str, int, str]] = []
    for part in batches:
        rows.extend(
            zip(
                part["CreatedTime"].tolist(),
                part["InvoiceNumber"].tolist(),
                part["CustomerType"].tolist(),
                part["PointsEarned"].tolist(),
                part["Invoice"].tolist(),
                strict=True,
            )
        )
    if not rows:
        return
    rows.sort(key=lambda row: (row[0], row[1]))
    customer = key[0]
    total, latest_time, latest_number = state.get if state.exists else (0, None, None)
    out: dict[str, list[Any]] = {column: [] for column in CUSTOMER_UPDATE_COLUMNS}

    def emit(kind: str, **values: Any) -> None:
        for column in CUSTOMER_UPDATE_COLUMNS:
            out[column].append(kind if column == "Kind" else values.get(column))

    earned = False
    for created, number, kind, points, _invoice in rows:
        if kind == "PRIME":
            total = int(total) + int(points)
            earned = True
            emit(
                NOTIFICATION,
                CustomerCardNo=customer,
                InvoiceNumber=number,
                CreatedTime=int(created),
                PointsEarned=int(points),
                TotalPoints=total,
            )
    if earned:
        emit(REWARD, CustomerCardNo=customer, TotalPoints=total)
    created, number, _kind, _points, invoice = rows[-1]
    if latest_time is None or (int(created), str(number)) > (int(latest_time), latest_number):
        latest_time, latest_number = int(created), str(number)
        emit(LATEST, CustomerCardNo=customer, Invoice=invoice)
    state.update((int(total), latest_time, latest_number))
    if out["Kind"]:
        yield pd.DataFrame(out)


def customer_updates(invoices: DataFrame) -> DataFrame:
    """Per customer, one state for two tables (`_customer_updates`): CUSTOMER_UPDATE_SCHEMA rows.

    Spark groups each customer's invoices (a shuffle: they arrive on many store partitions)
    once for both tables.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    return (
        invoices.select(
            "CustomerCardNo",
            "CustomerType",
            "InvoiceNumber",
            "CreatedTime",
            F.when(F.col("CustomerType") == "PRIME", F.floor(F.col("TotalAmount") / POINTS_PER))
            .otherwise(0)
            .cast("long")
            .alias("PointsEarned"),
            F.col("value").cast("string").alias("Invoice"),
        )
        .groupBy("CustomerCardNo")
        .applyInPandasWithState(
            _customer_updates,
            outputStructType=CUSTOMER_UPDATE_SCHEMA,
            stateStructType=CUSTOMER_STATE_SCHEMA,
            outputMode="update",
            timeoutConf=GroupStateTimeout.NoTimeout,
        )
    )


def pipeline(ctx: PipelineContext) -> None:
    """Start the three queries of the point-of-sale pipeline on *ctx*."""
    from pyspark.sql import functions as F

    topics = {
        name: ctx.params.get(f"{name}_topic", default) for name, default in DEFAULT_TOPICS.items()
    }
    partitions = int(ctx.params.get("table_partitions", "6"))
    ctx.create_topics(
        topics["shipments"],
        topics["loyalty"],
        topics["hadoop"],
        topics["dead_letter"],
        partitions=int(ctx.params.get("topic_partitions", "3")),
    )
    # 0. Reference data: the global table `stores`, written once.
    ctx.materialize(
        ctx.spark.createDataFrame(
            store_directory(int(ctx.params.get("stores", str(DEFAULT_STORES)))),
            "StoreID string, Name string, City string, State string",
        ),
        table="stores",
        key="StoreID",
        value=F.struct("Name", "City", "State"),
        kind="global",
        partitions=partitions,
        description="store -> name, city and state (global: every node holds it whole)",
    )
    raw = ctx.read(topics["source"])
    parsed = parse_invoices(raw)

    # 1. Stateless branches, with the dead letters counted.
    routed = parsed.observe(
        "pos",
        F.count(F.lit(1)).alias("records"),
        F.sum(F.col("reason").isNotNull().cast("long")).alias("dead_letters"),
    )
    ctx.write(_routes(routed, topics), name="pos-routes")

    invoices = valid_invoices(parsed)

    # 2. Per customer, one state for two tables: running loyalty points of PRIME customers
    #    (notifications on `loyalty` + table `rewards`) and the newest invoice (table
    #    `latest-invoice`).
    rewards = define_table(
        "rewards",
        partitions=partitions,
        app=ctx.app,
        description="customer card -> total loyalty points (PRIME customers)",
    )
    latest = define_table(
        "latest-invoice",
        partitions=partitions,
        app=ctx.app,
        description="customer card -> the customer's latest invoice",
    )
    for table in (rewards, latest):
        ctx.prepare_table(table)
    updates = customer_updates(invoices)
    kind = F.col("Kind")
    reward_key, reward_value = changelog_columns(
        updates, rewards, key="CustomerCardNo", value=F.struct("CustomerCardNo", "TotalPoints")
    )
    latest_key, latest_value = changelog_columns(
        updates, latest, key="CustomerCardNo", value="Invoice"
    )
    notification = F.to_json(
        F.struct("CustomerCardNo", "InvoiceNumber", "CreatedTime", "PointsEarned", "TotalPoints")
    ).cast("binary")
    customer_out = updates.select(
        F.when(kind == NOTIFICATION, F.lit(topics["loyalty"]))
        .when(kind == REWARD, F.lit(rewards.topic))
        .otherwise(F.lit(latest.topic))
        .alias("topic"),
        F.when(kind == REWARD, reward_key).otherwise(latest_key).alias("key"),
        F.when(kind == NOTIFICATION, notification)
        .when(kind == REWARD, reward_value)
        .otherwise(latest_value)
        .alias("value"),
    )
    ctx.write(customer_out, name="customers", output_mode="update", tables=(rewards, latest))

    # 3. Windowed table `store-sales`: sales per store and minute.
    ctx.materialize(
        store_sales(invoices),
        table="store-sales",
        key="StoreID",
        window="window",
        window_size=WINDOW,
        retention=RETENTION,
        value=F.struct("Sales", "Invoices"),
        partitions=partitions,
        description="store -> sales and invoice count per 1-minute window, kept an hour",
    )
