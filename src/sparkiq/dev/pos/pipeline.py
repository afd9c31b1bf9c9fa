"""The retail point-of-sale pipeline: sparkiq's example and the demo's data pipeline.

Run it with ``sparkiq run src/sparkiq/dev/pos/pipeline.py --bootstrap-servers HOST:PORT``.

Invoices (JSON, keyed by store id) arrive on ``pos``; each query parses each invoice once
(`parse_invoices`), and only the fields it needs (`ROUTES_SCHEMA`, `TABLES_SCHEMA`).
The pipeline writes:

- the tables and the loyalty notifications, from one Spark aggregation
  (`sparkiq.dev.pos.tables`): the table ``latest-invoice`` gets customer -> the invoice
  with the greatest (CreatedTime, InvoiceNumber), as received; ``rewards`` gets customer ->
  total points of a PRIME customer, whose invoices earn ``floor(TotalAmount / 50)`` points
  each; the windowed table ``store-sales`` gets store -> sales (exact decimal sum) and
  invoice count per 1-minute window of CreatedTime, each window kept an hour (the table's
  retention); each PRIME invoice becomes a notification on ``loyalty`` carrying the points
  earned and the customer's new running total (`sparkiq.dev.pos.loyalty`). An invoice
  more than 10 minutes older than the newest one is left out of the store's sales and of
  the notifications (its points still count in ``rewards``).
- the routes (topics, no state): a record whose value does not parse as an invoice goes to
  ``pos-dead-letter`` with the reason and its source position, and is counted (observed
  metric ``dead_letters``); HOME-DELIVERY invoices go to ``shipments`` as received; every
  invoice is masked (no card number, no contact number) and flattened to one record per
  line item on ``hadoop-sink``.

Before them, the global table ``stores`` (store id -> name, city, state: reference data
every node holds whole) is written once from `store_directory`.

Two layouts (``sparkiq run --param layout=...``), measured side by side in docs/benchmark-levers.md
(``bench_pipeline.py``):

- ``two-queries`` (the default): query ``tables`` writes the tables and the notifications,
  a micro-batch every `TABLES_TRIGGER`; query ``pos-routes`` the routes, every
  `ROUTES_TRIGGER`. Each query reads and parses every invoice (the tables' query only
  the fields it needs), but the tables' micro-batches stay short, and the tables are as
  fresh as they are.
- ``one-query``: query ``pos`` writes everything, a micro-batch every `TABLES_TRIGGER`,
  reading and parsing each invoice once (`shared_invoices`), but shuffling the parsed
  invoices to share them between its branches. A burst is digested no faster than with
  two queries (the shuffle costs what the second read and parse saved), and every
  micro-batch is longer (a stage more, the routes' work), and so are the tables' refreshes.

With ``sparkiq run --trigger realtime`` the routes' query runs in Spark's Real-Time Mode
(stateless: each invoice through to its topics in milliseconds) where Spark's Kafka connector
is installed; the tables' query aggregates and finishes the notifications on the driver, so
it runs in micro-batches and says so at start (Spark 4.2's Real-Time Mode runs no
aggregation; 4.3's does, but not a ``foreachBatch`` step).

The parameters ``tables_trigger`` and ``routes_trigger`` override the triggers. In
``two-queries`` a routes micro-batch reads up to as many more invoices than the pipeline's
cap as its trigger is longer than the tables' (`routes_cap`), so a backlog goes at the
tables' pace.

`sparkiq.dev.pos.oracle` computes every output of this file in plain Python; the end-to-end
tests compare the two.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkiq.core.durations import parse_duration_ms
from sparkiq.core.errors import ConfigError
from sparkiq.dev.pos.generator import DEFAULT_STORES, store_directory
from sparkiq.dev.pos.loyalty import with_notifications
from sparkiq.dev.pos.tables import NOTE_TYPE, table_records
from sparkiq.spark.materialize import define_table
from sparkiq.spark.realtime import TriggerMode

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from sparkiq.core.tables import TableDef
    from sparkiq.spark.pipeline import PipelineContext


WINDOW = "1 minute"  # tables.WINDOW_MS
RETENTION = "1 hour"  # store-sales windows are kept this long after the newest one ends
TABLES_TRIGGER = "250 milliseconds"
ROUTES_TRIGGER = "2 seconds"
LAYOUTS = ("two-queries", "one-query")
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


# What the tables need of an invoice (`sparkiq.dev.pos.tables`): the required fields, the
# line items only as far as counting them. Jackson still reads the whole text, but builds
# no value for a field left out (the line items' descriptions and decimals above all).
TABLES_SCHEMA = (
    "InvoiceNumber string, CreatedTime long, StoreID string, CustomerType string, "
    "CustomerCardNo string, TotalAmount decimal(12,2), DeliveryType string, "
    "InvoiceLineItems array<struct<ItemCode: string>>"
)


# What the routes need (`_routes`; the tables' fields too, for `one-query`): the invoice less
# the cashier, the item count, the taxes and the address line and contact number. Four
# decimals fewer to build per invoice; a line item's record is the same either way.
ROUTES_SCHEMA = (
    "InvoiceNumber string, CreatedTime long, StoreID string, PosID string, "
    "CustomerType string, CustomerCardNo string, TotalAmount decimal(12,2), "
    "PaymentMethod string, DeliveryType string, "
    "DeliveryAddress struct<City: string, State: string, PinCode: string>, "
    "InvoiceLineItems array<struct<ItemCode: string, ItemDescription: string, "
    "ItemPrice: decimal(12,2), ItemQty: int, TotalValue: decimal(12,2)>>"
)


def parse_invoices(raw: DataFrame, schema: str = INVOICE_SCHEMA) -> DataFrame:
    """*raw* Kafka rows plus ``inv`` (the parsed invoice) and ``reason`` (null when valid).

    *schema* is the invoice's (`INVOICE_SCHEMA`) or a part of it that holds every
    `REQUIRED` field (`ROUTES_SCHEMA`, `TABLES_SCHEMA`): a record is valid with all or none, and
    an invalid one gets the same reason, since only the required fields decide and a field
    that does not parse is null on its own (Spark's partial results).

    Each value is parsed once. ``inv`` comes out of a generator (`explode` of a one-element
    array) rather than a projection on purpose: a filter on ``reason`` is pushed by Spark's
    optimizer below a projection, and it would copy `from_json` into each of the reason's
    conditions, parsing every invoice ~18 times per query (seen in the physical plan); a
    filter on a generator's output stays above it.
    """
    from pyspark.sql import functions as F

    parsed = raw.select(
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        F.explode(F.array(F.from_json(_text(), schema, {"mode": "PERMISSIVE"}))).alias("inv"),
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
        .when(F.get_json_object(_text(), "$").isNull(), F.lit("not a JSON document"))
    )
    for name in REQUIRED:
        reason = reason.when(
            inv.isNull() | inv[name].isNull(), F.lit(f"missing or invalid field {name}")
        )
    reason = reason.when(F.size("inv.InvoiceLineItems") == 0, F.lit("no line items"))
    return parsed.withColumn("reason", reason)


def _text() -> Column:
    from pyspark.sql import functions as F

    return F.col("value").cast("string")


def shared_invoices(parsed: DataFrame, partitions: int) -> DataFrame:
    """*parsed* (`parse_invoices`) behind one shuffle into *partitions* that every branch
    of the query reads: Spark plans a scan per branch, but reuses an exchange two branches
    share (``ReusedExchange``), so the source is read and parsed once per micro-batch.

    Two branches share the exchange only if the plans below it are the same: the rows go
    through it as one struct that each branch takes whole, and neither may push a filter
    (`valid_invoices` keeps its rows with a generator) or pick nested fields below it (the
    session's ``spark.sql.optimizer.nestedSchemaPruning.enabled`` and
    ``spark.sql.optimizer.expression.nestedPruning.enabled`` must be false:
    `share_scans`).
    """
    from pyspark.sql import functions as F

    packed = parsed.select(F.struct(*parsed.columns).alias("r"))
    return packed.repartition(partitions, F.col("r.offset")).select("r.*")


def share_scans(spark: SparkSession) -> None:
    """Let `shared_invoices`'s exchange be shared by every branch in *spark*'s queries."""
    spark.conf.set("spark.sql.optimizer.nestedSchemaPruning.enabled", "false")
    spark.conf.set("spark.sql.optimizer.expression.nestedPruning.enabled", "false")


def valid_invoices(parsed: DataFrame) -> DataFrame:
    """The invoices of *parsed* (`parse_invoices`) that are valid: ``value`` plus their fields.

    Kept by a generator (an invalid row's array is null, and ``explode_outer`` gives it a
    null that the filter above drops) rather than a filter on ``reason``, which Spark would
    push below `shared_invoices`'s exchange.
    """
    from pyspark.sql import functions as F

    kept = F.when(F.col("reason").isNull(), F.array(F.struct("value", "inv")))
    rows = parsed.select(F.explode_outer(kept).alias("v")).where(F.col("v").isNotNull())
    return rows.select("v.value", "v.inv.*")


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
                _text().alias("value"),
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


def routes_cap(cap: int | None, routes_trigger: str, tables_trigger: str) -> int | None:
    """The most records a micro-batch of the routes reads: the pipeline's *cap* (None: no
    cap) times as many as the routes' trigger interval is longer than the tables'.

    A query reads at most its cap per micro-batch and starts one at most every interval, so
    through a backlog the routes (a batch every 2 s) would go at most cap / 2 s, and the
    pipeline would catch up at that pace however fast the tables go: 20,000 per 2 s, 10,000
    invoices/s, with `bench_pipeline.py`'s cap, where the tables' 20,000-invoice
    micro-batches took about a second. Scaled, the routes' ceiling is the tables'.
    """
    if cap is None:
        return None
    routes_ms = parse_duration_ms(routes_trigger)
    tables_ms = parse_duration_ms(tables_trigger)
    return max(cap, cap * routes_ms // tables_ms)


def pos_tables(app: str, partitions: int) -> dict[str, TableDef]:
    """The pipeline's tables by name, each with its changelog topic: ``stores`` (global),
    ``rewards``, ``latest-invoice`` and ``store-sales`` (windowed)."""
    tables = [
        define_table(
            "stores",
            partitions=partitions,
            app=app,
            kind="global",
            description="store -> name, city and state (global: every node holds it whole)",
        ),
        define_table(
            "rewards",
            partitions=partitions,
            app=app,
            description="customer card -> total loyalty points (PRIME customers)",
        ),
        define_table(
            "latest-invoice",
            partitions=partitions,
            app=app,
            description="customer card -> the customer's latest invoice",
        ),
        define_table(
            "store-sales",
            partitions=partitions,
            app=app,
            window_size=WINDOW,
            retention=RETENTION,
            description="store -> sales and invoice count per 1-minute window, kept an hour",
        ),
    ]
    return {table.name: table for table in tables}


def pipeline(ctx: PipelineContext) -> None:
    """Start the point-of-sale pipeline's queries on *ctx* (see the module for the layouts)."""
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
    stores, rewards, latest, sales = pos_tables(ctx.app, partitions).values()
    # 0. Reference data: the global table `stores`, written once.
    ctx.materialize(
        ctx.spark.createDataFrame(
            store_directory(int(ctx.params.get("stores", str(DEFAULT_STORES)))),
            "StoreID string, Name string, City string, State string",
        ),
        table=stores.name,
        key="StoreID",
        value=F.struct("Name", "City", "State"),
        kind=stores.kind.value,
        partitions=stores.partitions,
        description=stores.description,
    )
    for table in (rewards, latest, sales):
        ctx.prepare_table(table)
    layout = ctx.params.get("layout", LAYOUTS[0])
    if layout not in LAYOUTS:
        raise ConfigError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    tables_trigger = ctx.params.get("tables_trigger", TABLES_TRIGGER)
    routes_trigger = ctx.params.get("routes_trigger", ROUTES_TRIGGER)
    # One query finishes on the driver (micro-batches in every mode) and keeps the pipeline's
    # cap. The routes' own query reads without one in a Real-Time run: Real-Time Mode
    # refuses a cap, and the routes need none there (they keep up record by record).
    if layout == "one-query":
        cap = ctx.max_offsets_per_trigger
    elif ctx.trigger_mode is TriggerMode.REALTIME:
        cap = None
    else:
        cap = routes_cap(ctx.max_offsets_per_trigger, routes_trigger, tables_trigger)
    source = parse_invoices(ctx.read(topics["source"], max_offsets_per_trigger=cap), ROUTES_SCHEMA)
    if layout == "one-query":
        share_scans(ctx.spark)
        # As many partitions after the shared exchange as the session has task slots.
        spread = int(ctx.params.get("partitions", ctx.spark.sparkContext.defaultParallelism))
        source = shared_invoices(source, spread)
    # The routes, with the dead letters counted.
    routed = source.observe(
        "pos",
        F.count(F.lit(1)).alias("records"),
        F.sum(F.col("reason").isNotNull().cast("long")).alias("dead_letters"),
    )
    routes = _routes(routed, topics)
    # Every table and the notifications from one aggregation (`sparkiq.dev.pos.tables`),
    # the notifications' running totals filled in on the driver.
    # In two queries, the tables' own read parses only what they need.
    # Its finishing step keeps the tables' query in micro-batches in every mode: its read
    # keeps the pipeline's cap.
    invoices = (
        source
        if layout == "one-query"
        else parse_invoices(
            ctx.read(topics["source"], max_offsets_per_trigger=ctx.max_offsets_per_trigger),
            TABLES_SCHEMA,
        )
    )
    tables = table_records(valid_invoices(invoices), rewards, latest, sales, topics["loyalty"])

    def write_tables(df: DataFrame, name: str) -> None:
        ctx.write(
            df,
            name=name,
            output_mode="update",
            tables=(rewards, latest, sales),
            trigger_interval=tables_trigger,
            finish=with_notifications,
            finish_rows=F.col("note").isNotNull(),  # the rows `with_notifications` needs
        )

    if layout == "one-query":
        write_tables(
            routes.withColumn("note", F.lit(None).cast(NOTE_TYPE)).unionByName(tables), "pos"
        )
        return
    write_tables(tables, "tables")
    ctx.write(routes, name="pos-routes", trigger_interval=routes_trigger)
