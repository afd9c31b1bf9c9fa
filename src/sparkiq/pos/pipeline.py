"""The retail point-of-sale pipeline: sparkiq's example and the demo's data pipeline.

Run it with ``sparkiq run src/sparkiq/pos/pipeline.py --bootstrap-servers HOST:PORT``.

Invoices (JSON, keyed by store id) arrive on ``pos``. Four streaming queries:

- ``pos-routes`` (stateless, one pass over each micro-batch): a record whose value does not
  parse as an invoice goes to ``pos-dead-letter`` with the reason and its source position,
  and is counted (observed metric ``dead_letters``); HOME-DELIVERY invoices go to
  ``shipments`` as received; every invoice is masked (no card number, no contact number)
  and flattened to one record per line item on ``hadoop-sink``.
- ``loyalty``: PRIME customers' invoices earn ``floor(TotalAmount / 50)`` points. Spark
  groups them by customer card (a shuffle: one customer's invoices arrive on many store
  partitions) and keeps the running total per customer in its state store
  (`applyInPandasWithState`). Each invoice becomes a notification on ``loyalty`` carrying
  the points earned and the new total; the last total of each micro-batch updates the
  table ``rewards`` (customer -> total points).
- table ``latest-invoice``: customer -> the invoice with the greatest
  (CreatedTime, InvoiceNumber), as received.
- table ``store-sales``, windowed: store -> sales per 1-minute window of CreatedTime
  (exact decimal sum and invoice count).

`sparkiq.pos.oracle` computes every output of this file in plain Python; the end-to-end
tests compare the two.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sparkiq.spark.materialize import changelog_columns, define_table

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.streaming.state import GroupState

    from sparkiq.spark.pipeline import PipelineContext

POINTS_PER = 50  # one loyalty point per 50 of invoice total, rounded down
WINDOW = "1 minute"
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
LOYALTY_SCHEMA = (
    "CustomerCardNo string, InvoiceNumber string, CreatedTime long, "
    "PointsEarned long, TotalPoints long, Latest boolean"
)


def parse_invoices(raw: DataFrame) -> DataFrame:
    """*raw* Kafka rows plus ``inv`` (the parsed invoice) and ``reason`` (null when valid)."""
    from pyspark.sql import functions as F

    text = F.col("value").cast("string")
    parsed = raw.select(
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        text.alias("text"),
        F.from_json(text, INVOICE_SCHEMA, {"mode": "PERMISSIVE"}).alias("inv"),
    )
    reason: Column = F.when(F.col("value").isNull(), F.lit("empty value")).when(
        F.get_json_object(F.col("text"), "$").isNull(), F.lit("not a JSON document")
    )
    for name in REQUIRED:
        reason = reason.when(
            F.col("inv").isNull() | F.col(f"inv.{name}").isNull(),
            F.lit(f"missing or invalid field {name}"),
        )
    reason = reason.when(F.size("inv.InvoiceLineItems") == 0, F.lit("no line items"))
    return parsed.withColumn("reason", reason)


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


def _running_points(
    key: tuple[Any, ...], batches: Iterator[Any], state: GroupState
) -> Iterator[Any]:
    """Per customer: the running point total over its invoices, in (time, number) order."""
    import pandas as pd  # type: ignore[import-untyped]

    frame = pd.concat(list(batches), ignore_index=True)
    frame = frame.sort_values(["CreatedTime", "InvoiceNumber"], kind="stable")
    before = int(state.get[0]) if state.exists else 0
    totals = frame["PointsEarned"].cumsum() + before
    state.update((int(totals.iloc[-1]),))
    latest = [False] * len(frame)
    latest[-1] = True
    yield pd.DataFrame(
        {
            "CustomerCardNo": frame["CustomerCardNo"].to_numpy(),
            "InvoiceNumber": frame["InvoiceNumber"].to_numpy(),
            "CreatedTime": frame["CreatedTime"].to_numpy(),
            "PointsEarned": frame["PointsEarned"].to_numpy(),
            "TotalPoints": totals.to_numpy(),
            "Latest": latest,
        }
    )


def pipeline(ctx: PipelineContext) -> None:
    """Start the four queries of the point-of-sale pipeline on *ctx*."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

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
    raw = ctx.read(topics["source"])
    parsed = parse_invoices(raw)

    # 1. Stateless branches, with the dead letters counted.
    routed = parsed.observe(
        "pos",
        F.count(F.lit(1)).alias("records"),
        F.sum(F.col("reason").isNotNull().cast("long")).alias("dead_letters"),
    )
    ctx.write(_routes(routed, topics), name="pos-routes")

    invoices = parsed.where(F.col("reason").isNull()).select("value", "inv.*")

    # 2. Loyalty: running points per PRIME customer -> notifications + table `rewards`.
    rewards = define_table(
        "rewards",
        partitions=partitions,
        app=ctx.app,
        description="customer card -> total loyalty points (PRIME customers)",
    )
    ctx.prepare_table(rewards)
    earned = invoices.where(F.col("CustomerType") == "PRIME").select(
        "CustomerCardNo",
        "InvoiceNumber",
        "CreatedTime",
        F.floor(F.col("TotalAmount") / POINTS_PER).cast("long").alias("PointsEarned"),
    )
    points = earned.groupBy("CustomerCardNo").applyInPandasWithState(
        _running_points,
        outputStructType=LOYALTY_SCHEMA,
        stateStructType="total long",
        outputMode="update",
        timeoutConf=GroupStateTimeout.NoTimeout,
    )
    notification = F.to_json(
        F.struct("CustomerCardNo", "InvoiceNumber", "CreatedTime", "PointsEarned", "TotalPoints")
    ).cast("binary")
    reward_key, reward_value = changelog_columns(
        points,
        rewards,
        key="CustomerCardNo",
        value=F.struct("CustomerCardNo", "TotalPoints"),
    )
    loyalty_out = (
        points.select(
            F.explode(
                F.array(
                    F.struct(
                        F.lit(topics["loyalty"]).alias("topic"),
                        F.col("CustomerCardNo").cast("binary").alias("key"),
                        notification.alias("value"),
                    ),
                    F.struct(
                        F.when(F.col("Latest"), F.lit(rewards.topic)).alias("topic"),
                        reward_key,
                        reward_value,
                    ),
                )
            ).alias("r")
        )
        .select("r.topic", "r.key", "r.value")
        .where(F.col("topic").isNotNull())
    )
    ctx.write(loyalty_out, name="loyalty", output_mode="update")

    # 3. Table `latest-invoice`: the newest invoice of each customer, as received.
    latest = invoices.groupBy("CustomerCardNo").agg(
        F.max_by(F.col("value").cast("string"), F.struct("CreatedTime", "InvoiceNumber")).alias(
            "invoice"
        )
    )
    ctx.materialize(
        latest,
        table="latest-invoice",
        key="CustomerCardNo",
        value="invoice",
        partitions=partitions,
        description="customer card -> the customer's latest invoice",
    )

    # 4. Windowed table `store-sales`: sales per store and minute.
    sales = (
        invoices.withColumn("ts", F.timestamp_millis("CreatedTime"))
        .withWatermark("ts", "10 minutes")
        .groupBy("StoreID", F.window("ts", WINDOW))
        .agg(F.sum("TotalAmount").alias("Sales"), F.count(F.lit(1)).alias("Invoices"))
    )
    ctx.materialize(
        sales,
        table="store-sales",
        key="StoreID",
        window="window",
        window_size=WINDOW,
        value=F.struct("Sales", "Invoices"),
        partitions=partitions,
        description="store -> sales and invoice count per 1-minute window",
    )
