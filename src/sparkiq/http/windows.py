"""The windows of one key (`GET /v1/tables/{table}/keys/{key}/windows?from=&to=`).

A windowed table stores each window of a key under the key followed by the window's start
(8 bytes, big-endian: `sparkiq.core.serde.window_store_key`), so a key's windows in a time
range are one scan of its partition's store.
"""

from __future__ import annotations

from sparkiq.core import positions
from sparkiq.core.queries import Failure, FailureReason
from sparkiq.core.serde import split_window_store_key, window_store_key
from sparkiq.core.tables import TableDef
from sparkiq.http.locate import LocalReplica
from sparkiq.http.params import Params, codecs, int_param, parse_key_text
from sparkiq.http.responses import Answer, Outcome, json_response

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def parse(
    table: TableDef, key_text: str, params: Params, max_key_bytes: int
) -> tuple[bytes, int, int] | Failure:
    """The key's wire form and the `from`/`to` bounds (ms, inclusive) a windows query asks."""
    if not table.is_windowed:
        return Failure(
            FailureReason.NOT_WINDOWED,
            f"table {table.name!r} is not windowed; use GET /v1/tables/{table.name}/keys/{{key}}",
        )
    lo = int_param(params, "from", _LONG_MIN, _LONG_MIN, _LONG_MAX)
    hi = int_param(params, "to", _LONG_MAX, _LONG_MIN, _LONG_MAX)
    if isinstance(lo, Failure):
        return lo
    if isinstance(hi, Failure):
        return hi
    assert lo is not None  # both have defaults
    assert hi is not None
    if lo > hi:
        return Failure(FailureReason.BAD_REQUEST, f"from ({lo}) is after to ({hi})")
    wire = parse_key_text(table, key_text, max_key_bytes)
    return wire if isinstance(wire, Failure) else (wire, lo, hi)


def read(
    table: TableDef,
    wire: bytes,
    lo: int,
    hi: int,
    partition: int,
    replica: LocalReplica,
    cap: int,
    node: str,
) -> Answer:
    """The answer: the key's windows starting in [lo, hi], at most `cap`, from `replica`."""
    key_codec, value_codec = codecs(table)
    key_store = key_codec.wire_to_store(wire)
    size = table.window_size_ms or 0
    render = value_codec.render
    width = len(key_store) + 8
    items: list[dict[str, object]] = []
    after: bytes | None = None
    while len(items) < cap:
        page = replica.store.scan(
            lo=window_store_key(key_store, lo),
            hi=window_store_key(key_store, hi),
            prefix=key_store,
            after=after,
            limit=cap,
        )
        for store_key, value in page:
            # Variable-length keys: another key may extend this one and sort inside the
            # range; every window of *this* key is exactly len(key) + 8 bytes long.
            if len(store_key) == width:
                start = split_window_store_key(store_key)[1]
                items.append({"start": start, "end": start + size, "value": render(value)})
        if len(page) < cap:
            break
        after = page[-1][0]
    outcome = Outcome.STANDBY if replica.is_standby else Outcome.LOCAL
    return json_response(
        {
            "table": table.name,
            "key": key_codec.render(wire),
            "items": items[:cap],
            "partition": partition,
            "offset": replica.offset,
            "token": positions.encode({partition: replica.offset}),
            "node": node,
            "standby": replica.is_standby,
        }
    ), outcome
