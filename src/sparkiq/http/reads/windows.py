"""The windows of one key (`GET /v1/tables/{table}/keys/{key}/windows?from=&to=`).

A windowed table stores each window of a key under the key followed by the window's start
(8 bytes, big-endian: `sparkiq.core.serde.window_store_key`), so a key's windows in a time
range are one scan of its partition's store. `from` and `to` are window starts (epoch ms,
ISO-8601 or relative to now: `sparkiq.core.timespec`); `order=desc` gives the newest window
first; `limit` windows at most (`max_windows` by default and at most), then `next_cursor`
to pass as `cursor` for the next page.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

import orjson

from sparkiq.core import positions
from sparkiq.core.kstreams import window_end_and_value
from sparkiq.core.queries import Failure, FailureReason, Order
from sparkiq.core.serde import split_window_store_key, window_store_key
from sparkiq.core.tables import TableDef
from sparkiq.core.timespec import now_ms
from sparkiq.http.messages.params import (
    Params,
    codecs,
    decode_cursor,
    encode_cursor,
    int_param,
    order_param,
    parse_key_text,
)
from sparkiq.http.messages.responses import Answer, Outcome, Response
from sparkiq.http.reads.locate import LocalReplica
from sparkiq.http.reads.ranges import time_bounds
from sparkiq.http.reads.scanning import PageMerge, Scan, scan_partition

PARAMS = ("from", "to", "limit", "cursor", "order")


@dataclass(frozen=True, slots=True)
class WindowsQuery:
    """The windows of one key (wire bytes) starting in [lo, hi] ms, a page of them."""

    wire: bytes
    lo: int
    hi: int
    limit: int
    order: Order = Order.ASC
    after: bytes | None = None  # the cursor: the store key of the last window of a page


def per_window(table: TableDef, what: str, key_text: str | None = None) -> Failure:
    """The 400 of *what* (a key read, a multi-get, a watch of a key) on a windowed table: a key
    there has a value per window, none of its own, and the answer says where its windows are
    (a 404 would say the key is absent when it has windows)."""
    path = f"/v1/tables/{quote(table.name, safe='')}"
    key = "{key}" if key_text is None else quote(key_text, safe="")
    return Failure(
        FailureReason.WINDOWED,
        f"table {table.name!r} is windowed: a key has a value per window, so {what} has no "
        f"single value to give; read the key's windows at GET {path}/keys/{key}/windows and "
        f"watch them at GET {path}/changes?from={key}&to={key}",
    )


def parse(
    table: TableDef, key_text: str, params: Params, max_key_bytes: int, max_windows: int
) -> WindowsQuery | Failure:
    """What a windows query asks (times relative to now are read against this node's clock)."""
    if not table.is_windowed:
        return Failure(
            FailureReason.NOT_WINDOWED,
            f"table {table.name!r} is not windowed; use GET /v1/tables/{table.name}/keys/{{key}}",
        )
    starts = time_bounds(params, now_ms())
    if isinstance(starts, Failure):
        return starts
    limit = int_param(params, "limit", max_windows, 1, max_windows)
    if isinstance(limit, Failure):
        return limit
    assert limit is not None
    order = order_param(params)
    if isinstance(order, Failure):
        return order
    wire = parse_key_text(table, key_text, max_key_bytes)
    if isinstance(wire, Failure):
        return wire
    after: bytes | None = None
    if "cursor" in params:
        cursor = decode_cursor(params["cursor"])
        if isinstance(cursor, Failure):
            return cursor
        key_store = codecs(table)[0].wire_to_store(wire)
        if len(cursor) != len(key_store) + 8 or not cursor.startswith(key_store):
            return Failure(
                FailureReason.BAD_REQUEST,
                f"cursor is not one of key {key_text!r}'s windows; pass the next_cursor of "
                "the previous page of this key as it is",
            )
        after = cursor
    return WindowsQuery(wire, starts[0], starts[1], limit, order, after)


def read(
    table: TableDef, query: WindowsQuery, partition: int, replica: LocalReplica, node: str
) -> Answer:
    """The answer: a page of the key's windows, from `replica`."""
    key_codec, value_codec = codecs(table)
    key_store = key_codec.wire_to_store(query.wire)
    width = len(key_store) + 8

    def own(store_key: bytes) -> bool:
        # Variable-length keys: another key may extend this one and sort inside the range;
        # every window of *this* key is exactly len(key) + 8 bytes long.
        return len(store_key) == width

    scan = Scan(
        lo=window_store_key(key_store, query.lo),
        hi=window_store_key(key_store, query.hi),
        prefix=key_store,
        after=query.after,
        order=query.order,
        keep=own,
    )
    merge: PageMerge[bytes] = PageMerge(query.order)
    merge.add(*scan_partition(replica.store, scan, query.limit + 1))
    page, resume = merge.page(query.limit)
    render = value_codec.render
    items = []
    for store_key, stored in page:
        start = split_window_store_key(store_key)[1]
        end, value = window_end_and_value(table, start, stored)
        items.append({"start": start, "end": end, "value": render(value)})
    outcome = Outcome.STANDBY if replica.is_standby else Outcome.LOCAL
    body = {
        "table": table.name,
        "key": key_codec.render(query.wire),
        "items": items,
        "next_cursor": None if resume is None else encode_cursor(resume),
        "partition": partition,
        "offset": replica.offset,
        "token": positions.encode({partition: replica.offset}),
        "node": node,
        "standby": replica.is_standby,
    }
    return Response(200, orjson.dumps(body)), outcome
