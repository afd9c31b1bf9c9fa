"""Pages that span partitions: a range of keys, and the windows of a range of keys.

`GET /v1/tables/{table}/range` pages through the table's entries in key order (each window
one entry on a windowed table); `GET /v1/tables/{table}/windows` through the windows of a
windowed table whose start lies in [`from`, `to`] (epoch ms, ISO-8601 or relative to now:
`sparkiq.core.timespec`), of the keys in [`key_from`, `key_to`] or with a `prefix`. Both take
`order=desc` (from the last key down; a key's windows newest first), `limit` and `cursor`.
Keys are in the order of their stored form (numeric for long and int keys, the bytes
otherwise); windows in (key, window start) order, which a windowed store does not quite keep
for keys that begin other keys: `windowwalk` reads them so.

Both read through the one read loop (`readloop`): this node's replicas directly, each
other node with ONE request for its partitions (the internal `partitions=` parameter, only
accepted from another node), standbys standing in for an active that cannot answer. Each
partition's rows are read within a budget (`scanning`, `windowwalk`) and merged in order
(`scanning.PageMerge`); another node returns each item's `store_key` and, as its
`next_cursor`, how far its partitions were read, so the merge does not depend on how keys
render. Relative times are turned into epoch ms once, by the node a client asked, so every
partition of a page is read with the same bounds. Answers carry `offsets` (partition -> the
changelog offset its replica had reached), `token` and `standby`, merged from every read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from urllib.parse import quote, urlencode

import orjson

from sparkiq.core.kstreams import window_end_and_value
from sparkiq.core.queries import Failure, FailureReason, Order
from sparkiq.core.serde import split_window_store_key, window_store_key
from sparkiq.core.tables import TableDef
from sparkiq.core.timespec import LONG_MAX, LONG_MIN, now_ms
from sparkiq.core.topology import TopicPartition
from sparkiq.http.messages.params import (
    AFTER_PARAM,
    AFTER_SOURCE_PARAM,
    Params,
    codecs,
    decode_cursor,
    encode_cursor,
    int_param,
    order_param,
    parse_key_text,
    partition_list,
    time_param,
)
from sparkiq.http.messages.responses import Answer, Outcome, Response, failure_response
from sparkiq.http.nodeview import ReadableStore
from sparkiq.http.reads import scanning
from sparkiq.http.reads.apiparts import ApiParts
from sparkiq.http.reads.gather import Sources, assembled_outcome
from sparkiq.http.reads.locate import Call, LocalReplica
from sparkiq.http.reads.readloop import read_partitions
from sparkiq.http.reads.scanning import PageMerge, Scan, scan_partition
from sparkiq.http.reads.windowwalk import KeySpan, walk_windows, window_order
from sparkiq.http.settings import FALLBACK_PARAM

_PAGED = ("limit", "cursor", "order", "max_lag", "partitions", FALLBACK_PARAM)
RANGE_PARAMS = frozenset(("from", "to", "prefix", *_PAGED, AFTER_PARAM, AFTER_SOURCE_PARAM))
WINDOW_RANGE_PARAMS = frozenset(
    ("from", "to", "key_from", "key_to", "prefix", *_PAGED, AFTER_PARAM, AFTER_SOURCE_PARAM)
)

# Window starts of a windowed table's store keys: the 8 bytes after the key.
_ALL_WINDOWS = b"\xff" * 8
# Windows of many keys are read from starts within this many ms of 1970 (about 1.1 million
# years): stored, they then begin with byte 0x7f or 0x80, which no text key has after a
# shorter key it begins, so telling whether a key has windows is a seek, not a scan of the
# longer keys' (`windowwalk`).
_FARTHEST = 2**55

Item = dict[str, object]
Scanned = tuple[list[tuple[bytes, bytes]], bytes | None]  # a partition's rows, where it stopped


async def range_scan(api: ApiParts, table: TableDef, params: Params, call: Call) -> Answer:
    """One page of `GET /v1/tables/{table}/range` (on a windowed table: of its windows)."""
    order = order_param(params)
    if isinstance(order, Failure):
        return _fail(order)
    if table.is_windowed:
        return await _windows_page(api, table, params, call, "range", order, (LONG_MIN, LONG_MAX))
    bounds = range_bounds(api, table, params)
    if isinstance(bounds, Failure):
        return _fail(bounds)
    lo, hi, prefix, after = bounds
    scan = Scan(lo, hi, prefix, after, order)

    def read(store: ReadableStore, fetch: int) -> Scanned:
        return scan_partition(store, scan, fetch)

    return await _page(api, table, params, call, "range", read, PageMerge(order))


async def window_range(api: ApiParts, table: TableDef, params: Params, call: Call) -> Answer:
    """One page of `GET /v1/tables/{table}/windows`: windows of many keys."""
    if not table.is_windowed:
        return _fail(
            Failure(
                FailureReason.NOT_WINDOWED,
                f"table {table.name!r} is not windowed; use GET /v1/tables/{table.name}/range",
            )
        )
    starts = time_bounds(params, now_ms())
    if isinstance(starts, Failure):
        return _fail(starts)
    order = order_param(params)
    if isinstance(order, Failure):
        return _fail(order)
    # Every partition, here or on another node, reads the same bounds: relative times are
    # sent on as the epoch ms they were here.
    forwarded = dict(params, **{"from": str(starts[0]), "to": str(starts[1])})
    return await _windows_page(api, table, forwarded, call, "windows", order, starts)


async def _windows_page(
    api: ApiParts,
    table: TableDef,
    params: Params,
    call: Call,
    endpoint: str,
    order: Order,
    starts: tuple[int, int],
) -> Answer:
    """A page of the windows starting in `starts` (ms) of the keys the parameters name, in
    (key, window start) order (`windowwalk`)."""
    names = ("key_from", "key_to", "prefix") if endpoint == "windows" else ("from", "to", "prefix")
    bounds = key_bounds(api, table, params, names)
    if isinstance(bounds, Failure):
        return _fail(bounds)
    lo, hi, prefix, cursor = bounds
    first, last = (window_store_key(b"", min(max(ms, -_FARTHEST), _FARTHEST)) for ms in starts)
    span = KeySpan(lo, hi, prefix, first, last)

    def read(store: ReadableStore, fetch: int) -> Scanned:
        return walk_windows(store, span, order, cursor, fetch, scanning.SCAN_BUDGET_ROWS)

    merge: PageMerge[Item] = PageMerge(order, window_order)
    return await _page(api, table, params, call, endpoint, read, merge)


def time_bounds(params: Params, now: int) -> tuple[int, int] | Failure:
    """The `from` and `to` window starts (ms, inclusive) a windows query asks."""
    lo = time_param(params, "from", LONG_MIN, now)
    if isinstance(lo, Failure):
        return lo
    hi = time_param(params, "to", LONG_MAX, now)
    if isinstance(hi, Failure):
        return hi
    if lo > hi:
        return Failure(FailureReason.BAD_REQUEST, f"from ({lo}) is after to ({hi})")
    return lo, hi


async def _page(
    api: ApiParts,
    table: TableDef,
    params: Params,
    call: Call,
    endpoint: str,
    read: Callable[[ReadableStore, int], Scanned],
    merge: PageMerge[Item],
) -> Answer:
    """One page: each partition's rows (`read` from a store here, or asked of the node
    that holds it at `endpoint`), merged by `merge`."""
    settings = api.settings
    internal = "partitions" in params
    if internal and call.hops == 0:
        return _fail(
            Failure(
                FailureReason.BAD_REQUEST,
                "partitions is internal to sparkiq nodes; ask for the whole table instead",
            )
        )
    # An owner asked by another node returns one more than the asker's page size.
    max_limit = settings.max_range_limit + (1 if internal else 0)
    limit = int_param(params, "limit", settings.default_range_limit, 1, max_limit)
    if isinstance(limit, Failure):
        return _fail(limit)
    assert limit is not None
    if internal:
        parts = partition_list(params["partitions"], table.partitions)
        if isinstance(parts, Failure):
            return _fail(parts)
    else:
        parts = list(range(table.partitions))
    fetch = limit + 1  # one more than the page: tells whether there is a next page
    reads = _PageReads(table, params, endpoint, read, merge, fetch)
    done = await read_partitions(api, call, [(table.topic, p) for p in parts], reads)
    if done is not None:
        return done
    page, resume = reads.merge.page(limit)
    next_cursor = None if resume is None else encode_cursor(resume)
    if internal:
        items = [dict(item, store_key=encode_cursor(sk)) for sk, item in page]
    else:
        items = [item for _, item in page]
    body = orjson.dumps({"items": items, "next_cursor": next_cursor, **reads.sources.fields()})
    return Response(200, body), assembled_outcome(reads.outcomes)


class _PageReads:
    """Each partition's first `fetch` rows of the scan, read here or asked of a node
    (`readloop.Reads`); the rows with their store keys, for the merge."""

    def __init__(
        self,
        table: TableDef,
        params: Params,
        endpoint: str,
        read: Callable[[ReadableStore, int], Scanned],
        merge: PageMerge[Item],
        fetch: int,
    ) -> None:
        self._table = table
        self._params = params
        self._endpoint = endpoint
        self._read = read
        self._fetch = fetch
        self.merge = merge
        self.outcomes: set[Outcome] = set()
        self.sources = Sources()

    def local(self, tp: TopicPartition, replica: LocalReplica) -> None:
        rows, reached = self._read(replica.store, self._fetch)
        self.merge.add(render_rows(self._table, rows), reached)
        self.outcomes.add(Outcome.STANDBY if replica.is_standby else Outcome.LOCAL)
        self.sources.local(tp[1], replica)

    def request(self, tps: Sequence[TopicPartition]) -> tuple[str, str, bytes | None]:
        """The page of `tps` asked with the internal `partitions=` parameter."""
        query = {
            k: v
            for k, v in self._params.items()
            if k not in ("limit", "partitions", FALLBACK_PARAM)
        }
        query["limit"] = str(self._fetch)
        query["partitions"] = ",".join(str(p) for _, p in tps)
        name = quote(self._table.name, safe="")
        return "GET", f"/v1/tables/{name}/{self._endpoint}?{urlencode(query)}", None

    def take(self, url: str, tps: Sequence[TopicPartition], answer: Response) -> Answer | None:
        if answer.status != 200:
            return answer, Outcome.FORWARDED
        doc = orjson.loads(answer.body)
        rows: list[tuple[bytes, Item]] = []
        for item in doc["items"]:
            store_key = decode_cursor(item.pop("store_key"))
            assert isinstance(store_key, bytes)
            rows.append((store_key, item))
        # The node's next_cursor: how far it read its partitions (null: to the end).
        reached = doc.get("next_cursor")
        resume = None if reached is None else decode_cursor(reached)
        assert not isinstance(resume, Failure)
        self.merge.add(rows, resume)
        self.sources.remote(doc)
        self.outcomes.add(Outcome.FORWARDED)
        return None


def range_bounds(
    api: ApiParts, table: TableDef, params: Params
) -> tuple[bytes | None, bytes | None, bytes | None, bytes | None] | Failure:
    """from/to/prefix/cursor -> store key bounds (lo, hi inclusive, prefix, after): on a
    windowed table `hi` takes in every window of the highest key."""
    bounds = key_bounds(api, table, params, ("from", "to", "prefix"))
    if isinstance(bounds, Failure) or not table.is_windowed:
        return bounds
    lo, hi, prefix, after = bounds
    return lo, None if hi is None else hi + _ALL_WINDOWS, prefix, after


def key_bounds(
    api: ApiParts, table: TableDef, params: Params, names: tuple[str, str, str]
) -> tuple[bytes | None, bytes | None, bytes | None, bytes | None] | Failure:
    """The lowest key, highest key and prefix parameters (`names`) as keys' store forms, and
    the cursor; a lowest key after the highest is refused."""
    codec = codecs(table)[0]
    limit = api.settings.max_key_bytes
    out: list[bytes | None] = []
    for name in names:
        text = params.get(name)
        if text is None:
            out.append(None)
            continue
        wire = parse_key_text(table, text, limit)
        if isinstance(wire, Failure):
            return Failure(wire.reason, f"{name}: {wire.message}")
        out.append(codec.wire_to_store(wire))
    lo, hi, prefix = out
    if lo is not None and hi is not None and lo > hi:
        # Nothing lies between them: an empty page would read as "no such keys".
        return Failure(
            FailureReason.BAD_REQUEST,
            f"{names[0]} ({params[names[0]]}) comes after {names[1]} ({params[names[1]]}) "
            "in the table's key order; swap them, or use order=desc to read downwards",
        )
    after: bytes | None = None
    if "cursor" in params:
        cursor = decode_cursor(params["cursor"])
        if isinstance(cursor, Failure):
            return cursor
        after = cursor
    return lo, hi, prefix, after


def render_rows(table: TableDef, rows: list[tuple[bytes, bytes]]) -> list[tuple[bytes, Item]]:
    """Store rows as answer items (`key`, `value`; `start` and `end` for a window)."""
    codec, value_codec = codecs(table)
    render_value = value_codec.render
    if not table.is_windowed:
        return [
            (sk, {"key": codec.render(codec.store_to_wire(sk)), "value": render_value(v)})
            for sk, v in rows
        ]
    out: list[tuple[bytes, Item]] = []
    for sk, stored in rows:
        key_store, start = split_window_store_key(sk)
        end, v = window_end_and_value(table, start, stored)
        item: Item = {
            "key": codec.render(codec.store_to_wire(key_store)),
            "start": start,
            "end": end,
            "value": render_value(v),
        }
        out.append((sk, item))
    return out


def _fail(failure: Failure) -> Answer:
    return failure_response(failure), Outcome.ERROR
