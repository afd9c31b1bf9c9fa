"""The state behind the point-of-sale tables: one `applyInPandasWithState` for all of them.

Every valid invoice becomes two rows of one grouped stream (`state_rows`): one for its
customer (group ``C<card>``) and one for its store (group ``S<store id>``). `update` keeps
one state per group and emits `UPDATE_SCHEMA` rows, told apart by ``Kind``:

- per customer (`_customer`): PRIME invoices earn points in (CreatedTime, InvoiceNumber)
  order, each a ``notification`` carrying the running total; the batch's last total is one
  ``reward`` row; the newest invoice of the batch is one ``latest`` row when it is newer
  than the one already in the table.
- per store (`_store`): the invoices' amounts (in cents: exact) and counts per 1-minute
  window of CreatedTime, a ``sales`` row per window the batch changed, with the
  ``Partition`` of the store id (murmur2, as a lookup of the store computes it: all windows
  of a store in one partition; a Spark SQL murmur2 would be planned again every
  micro-batch). A store keeps the
  windows that start within `LATENESS_MS` of its newest one; an invoice for an older window
  comes too late and is left out (as a watermark would drop it, but per store: a quiet
  store's late invoice is not dropped because the others moved on).

One query for every table, rather than a Spark aggregation for the windows beside a
per-customer state: every query reads and parses the input and pays a fixed cost per
micro-batch (planning, offsets, commits, a round trip through Python), which at a steady
50 invoices/s is most of a table's freshness on a small machine; and Spark refuses an
``applyInPandasWithState`` in update mode and an aggregation in one query. Keeping a
store's windows in one state needs no timeouts: Spark would otherwise call Python each
micro-batch to evict windows (`benchmarks/bench_pipeline.py` measures the whole).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sparkiq.core.partitioner import partition_for

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.streaming.state import GroupState

POINTS_PER = 50  # one loyalty point per 50 of invoice total, rounded down
WINDOW_MS = 60_000  # store-sales windows: 1 minute of CreatedTime
LATENESS_MS = 10 * 60_000  # a store's windows this much older than its newest are closed
CUSTOMER, STORE = "C", "S"  # the first letter of a group key
NOTIFICATION, REWARD, LATEST, SALES = "notification", "reward", "latest", "sales"
UPDATE_SCHEMA = (
    "Kind string, CustomerCardNo string, InvoiceNumber string, CreatedTime long, "
    "PointsEarned long, TotalPoints long, Invoice string, StoreID string, WindowStart long, "
    "Cents long, Invoices long, Partition int"
)
UPDATE_COLUMNS = [c.split()[0] for c in UPDATE_SCHEMA.split(", ")]
# A customer's state fills the first three fields; a store's the last: its windows as
# "start:cents:count" joined by "," (Spark's Python state takes no arrays).
STATE_SCHEMA = "total long, latest_time long, latest_number string, windows string"

Columns = dict[str, list[Any]]

# pyspark concatenates the frames `update` yields; columns a kind of row leaves empty make
# pandas warn (a FutureWarning per micro-batch in the pipeline's log) about a behaviour
# these rows do not depend on.
warnings.filterwarnings(
    "ignore",
    message="The behavior of DataFrame concatenation with empty or all-NA entries",
    category=FutureWarning,
)


# What `state_rows` hands the state function beside the group key, and their types.
_STATE_ROW = {
    "CustomerType": "string",
    "InvoiceNumber": "string",
    "CreatedTime": "long",
    "PointsEarned": "long",
    "Invoice": "string",
    "WindowStart": "long",
    "Cents": "long",
}


def _state_row(group: Column, **fields: Column) -> Column:
    """A `state_rows` struct: the group key ``G``, then every `_STATE_ROW` field in order
    (null where *fields* does not give it: both kinds of row must have one shape)."""
    from pyspark.sql import functions as F

    null = F.lit(None)
    typed = (fields.get(name, null).cast(kind).alias(name) for name, kind in _STATE_ROW.items())
    return F.struct(group.alias("G"), *typed)


def state_rows(invoices: DataFrame) -> DataFrame:
    """Two rows per invoice of *invoices* (`pipeline.valid_invoices`): its customer's and its
    store's, with the group key ``G`` and only the fields each needs."""
    from pyspark.sql import functions as F

    points = (
        F.when(F.col("CustomerType") == "PRIME", F.floor(F.col("TotalAmount") / POINTS_PER))
        .otherwise(0)
        .cast("long")
    )
    start = F.col("CreatedTime") - F.pmod(F.col("CreatedTime"), F.lit(WINDOW_MS))
    customer = _state_row(
        F.concat(F.lit(CUSTOMER), "CustomerCardNo"),
        CustomerType=F.col("CustomerType"),
        InvoiceNumber=F.col("InvoiceNumber"),
        CreatedTime=F.col("CreatedTime"),
        PointsEarned=points,
        Invoice=F.col("value"),
    )
    store = _state_row(
        F.concat(F.lit(STORE), "StoreID"),
        WindowStart=start,
        Cents=F.col("TotalAmount") * 100,
    )
    return invoices.select(F.explode(F.array(customer, store)).alias("r")).select("r.*")


def table_updates(invoices: DataFrame, sales_partitions: int) -> DataFrame:
    """`UPDATE_SCHEMA` rows for every table of *invoices*: `state_rows` grouped by ``G``;
    *sales_partitions*: the partitions of the store-sales changelog."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    return (
        state_rows(invoices)
        .groupBy("G")
        .applyInPandasWithState(
            functools.partial(update, sales_partitions=sales_partitions),
            outputStructType=UPDATE_SCHEMA,
            stateStructType=STATE_SCHEMA,
            outputMode="update",
            timeoutConf=GroupStateTimeout.NoTimeout,
        )
    )


def update(
    key: tuple[Any, ...], batches: Iterator[Any], state: GroupState, *, sales_partitions: int
) -> Iterator[Any]:
    """One group's micro-batch (Spark calls this once per group and batch)."""
    import pandas as pd  # type: ignore[import-untyped]

    group = str(key[0])
    if group.startswith(STORE):
        out = _store(group[len(STORE) :], batches, state, sales_partitions)
    else:
        out = _customer(group[len(CUSTOMER) :], batches, state)
    if out["Kind"]:
        yield pd.DataFrame(out)


def _empty() -> Columns:
    return {column: [] for column in UPDATE_COLUMNS}


def _emit(out: Columns, kind: str, **values: Any) -> None:
    for column in UPDATE_COLUMNS:
        out[column].append(kind if column == "Kind" else values.get(column))


def _customer(customer: str, batches: Iterator[Any], state: GroupState) -> Columns:
    # Plain Python over the group's few rows: each pandas operation costs more than the
    # whole loop here.
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
    out = _empty()
    if not rows:
        return out
    rows.sort(key=lambda row: (row[0], row[1]))
    total, latest_time, latest_number, _ = state.get if state.exists else (0, None, None, None)
    earned = False
    for created, number, kind, points, _invoice in rows:
        if kind == "PRIME":
            total = int(total) + int(points)
            earned = True
            _emit(
                out,
                NOTIFICATION,
                CustomerCardNo=customer,
                InvoiceNumber=number,
                CreatedTime=int(created),
                PointsEarned=int(points),
                TotalPoints=total,
            )
    if earned:
        _emit(out, REWARD, CustomerCardNo=customer, TotalPoints=total)
    created, number, _kind, _points, invoice = rows[-1]
    if latest_time is None or (int(created), str(number)) > (int(latest_time), latest_number):
        latest_time, latest_number = int(created), str(number)
        _emit(out, LATEST, CustomerCardNo=customer, Invoice=invoice)
    state.update((int(total), latest_time, latest_number, None))
    return out


def decode_windows(text: str | None) -> dict[int, tuple[int, int]]:
    """A store's state: window start -> (cents, invoices)."""
    if not text:
        return {}
    out: dict[int, tuple[int, int]] = {}
    for item in text.split(","):
        start, cents, count = item.split(":")
        out[int(start)] = (int(cents), int(count))
    return out


def encode_windows(windows: dict[int, tuple[int, int]]) -> str:
    return ",".join(f"{s}:{c}:{n}" for s, (c, n) in sorted(windows.items()))


def _store(store: str, batches: Iterator[Any], state: GroupState, partitions: int) -> Columns:
    windows = decode_windows(state.get[3] if state.exists else None)
    newest = max(windows, default=None)
    changed: set[int] = set()
    for part in batches:
        for start, cents in zip(part["WindowStart"].tolist(), part["Cents"].tolist(), strict=True):
            if newest is not None and start < newest - LATENESS_MS:
                continue  # its window is closed
            have_cents, have_count = windows.get(start, (0, 0))
            windows[start] = (have_cents + int(cents), have_count + 1)
            changed.add(start)
            if newest is None or start > newest:
                newest = start
    out = _empty()
    if not changed or newest is None:
        return out
    kept = {s: w for s, w in windows.items() if s >= newest - LATENESS_MS}
    state.update((None, None, None, encode_windows(kept)))
    partition = partition_for(store.encode(), partitions)
    for start in sorted(changed):
        cents, count = windows[start]
        _emit(
            out,
            SALES,
            StoreID=store,
            WindowStart=start,
            Cents=cents,
            Invoices=count,
            Partition=partition,
        )
    return out
