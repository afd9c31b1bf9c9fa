"""Multi-get, and the lookups of keys outside their own partition.

Multi-get reads through the one read loop (`readloop`, by way of `gather`): this node's
replicas are read directly; each other node gets ONE request for its partitions, all in
parallel; standbys stand in for an active that cannot answer, within the budget. On a table
of partitioner `any`, or whose changelog holds misplaced records, keys missing from their
own partition are then looked for in every other one (`looks_everywhere`, `find_key` for
single keys). The answers carry `offsets` (partition -> the changelog offset its replica had
reached) and `standby` (whether any part came from a standby), merged from the nodes'
answers. Pages of ranges and windows are `sparkiq.http.ranges`'.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import orjson

from sparkiq.core import positions
from sparkiq.core.queries import Failure, FailureReason
from sparkiq.core.tables import TableDef
from sparkiq.core.topology import TopicPartition
from sparkiq.http.gather import (
    Gathered,
    decode_wire_keys,
    gather,
    probe_items,
)
from sparkiq.http.locate import Call
from sparkiq.http.params import (
    Params,
    codecs,
    parse_key_json,
)
from sparkiq.http.parts import ApiParts
from sparkiq.http.responses import Answer, Outcome, Response, failure_response

# -- multi-get ---------------------------------------------------------------------------------


async def multi_get(
    api: ApiParts, table: TableDef, params: Params, call: Call, body: bytes
) -> Answer:
    settings = api.settings
    if len(body) > settings.max_body_bytes:
        return _fail(
            Failure(FailureReason.TOO_LARGE, f"body is over {settings.max_body_bytes} bytes")
        )
    if "partitions" in params:
        return await _probe(api, table, params, call, body)
    try:
        doc: Any = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return _fail(Failure(FailureReason.BAD_REQUEST, f"body is not JSON: {exc}"))
    raw_keys = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(raw_keys, list):
        return _fail(
            Failure(FailureReason.BAD_REQUEST, 'body must be a JSON object {"keys": [...]}')
        )
    if len(raw_keys) > settings.max_multi_get_keys:
        return _fail(
            Failure(
                FailureReason.TOO_LARGE,
                f"{len(raw_keys)} keys; at most {settings.max_multi_get_keys} per multi-get",
            )
        )
    wires: list[bytes] = []
    for i, raw in enumerate(raw_keys):
        wire = parse_key_json(table, raw, i, settings.max_key_bytes)
        if isinstance(wire, Failure):
            return _fail(wire)
        wires.append(wire)
    homes = [table.partition_of(wire) for wire in wires]
    got = Gathered()
    if table.has_fixed_placement:
        plan: dict[TopicPartition, list[int]] = defaultdict(list)
        for i, home in enumerate(homes):
            assert home is not None
            plan[(table.topic, home)].append(i)
        done = await gather(
            api, table, wires, plan, call, probing=False, public_keys=raw_keys, into=got
        )
        if not isinstance(done, Gathered):
            return done
    if not table.has_fixed_placement or looks_everywhere(api, table, call):
        missing = [i for i in range(len(wires)) if not got.hits.get(i)]
        done = await gather(
            api, table, wires, _elsewhere(table, missing, homes), call, probing=True, into=got
        )
        if not isinstance(done, Gathered):
            return done
    render_key = codecs(table)[0].render
    items = []
    for i, wire in enumerate(wires):
        hit = got.best(i, homes[i])
        items.append({"key": render_key(wire), "value": None if hit is None else hit.value})
    body = orjson.dumps({"items": items, **got.sources.fields()})
    return Response(200, body), got.outcome()


def looks_everywhere(api: ApiParts, table: TableDef, call: Call) -> bool:
    """Whether keys missing from their own partition are looked for in every other one:
    on a table of unknown placement, or one whose changelog holds misplaced records. Only
    the node a client asked does it (another node asked on its behalf answers for the
    key's own partition alone)."""
    if call.hops or call.fallback_lag is not None:
        return False
    return not table.has_fixed_placement or api.view.misplaced_records(table.name) > 0


def _elsewhere(
    table: TableDef, indices: Sequence[int], homes: Sequence[int | None]
) -> dict[TopicPartition, list[int]]:
    """Every partition but its own for each key at `indices`."""
    plan: dict[TopicPartition, list[int]] = {}
    for p in range(table.partitions):
        wanted = [i for i in indices if homes[i] != p]
        if wanted:
            plan[(table.topic, p)] = wanted
    return plan


async def _probe(api: ApiParts, table: TableDef, params: Params, call: Call, body: bytes) -> Answer:
    """Another node's probe: every key of the body in every partition listed."""
    parts = _probed_partitions(params, table, call, 'send {"keys": [...]} instead')
    if isinstance(parts, Failure):
        return _fail(parts)
    wires = decode_wire_keys(body)
    if isinstance(wires, Failure):
        return _fail(wires)
    every = list(range(len(wires)))
    plan = {(table.topic, p): every for p in parts}
    got = await gather(api, table, wires, plan, call, probing=True)
    if not isinstance(got, Gathered):
        return got
    items = probe_items(table, wires, got)
    return Response(200, orjson.dumps({"items": items, **got.sources.fields()})), got.outcome()


async def probe_key(
    api: ApiParts, table: TableDef, key_text: str, wire: bytes, params: Params, call: Call
) -> Answer:
    """Another node's probe of one key (`GET .../keys/{key}?partitions=...`): the key from
    the listed partitions only, or 404 if none holds it."""
    parts = _probed_partitions(params, table, call, "ask for the key without it")
    if isinstance(parts, Failure):
        return _fail(parts)
    return await find_key(api, table, key_text, wire, None, call, only=parts)


def _probed_partitions(
    params: Params, table: TableDef, call: Call, instead: str
) -> list[int] | Failure:
    """The partitions a probe lists: only another node may send one (`instead`: what a
    client should do)."""
    if call.hops == 0:
        return Failure(
            FailureReason.BAD_REQUEST, f"partitions is internal to sparkiq nodes; {instead}"
        )
    return partition_list(params["partitions"], table.partitions)


async def find_key(
    api: ApiParts,
    table: TableDef,
    key_text: str,
    wire: bytes,
    home: int | None,
    call: Call,
    *,
    only: Sequence[int] | None = None,
) -> Answer:
    """A key missing from its own partition `home` (None: placement unknown), looked for in
    every other partition (or in `only`): the answer of `GET .../keys/{key}` from where it
    was found."""
    parts = [p for p in range(table.partitions) if p != home] if only is None else only
    plan = {(table.topic, p): [0] for p in parts}
    got = await gather(api, table, [wire], plan, call, probing=True)
    if not isinstance(got, Gathered):
        return got
    hit = got.best(0)
    if hit is None:
        return _fail_as(absent_everywhere(table, key_text, home), got.outcome())
    node = api.view.url
    outcome = Outcome.FORWARDED if hit.node != node else got.outcome()
    answer = {
        "table": table.name,
        "key": codecs(table)[0].render(wire),
        "value": hit.value,
        "partition": hit.partition,
        "offset": hit.offset,
        "token": positions.encode(got.sources.offsets),
        "node": hit.node,
        "standby": hit.standby,
    }
    return Response(200, orjson.dumps(answer)), outcome


def absent_everywhere(table: TableDef, key_text: str, home: int | None) -> Failure:
    """The 404 of a key that no partition of `table` holds (`home`: its own partition)."""
    where = "in any partition" if home is None else f"in partition {home} or any other"
    return Failure(
        FailureReason.NOT_FOUND,
        f"key {key_text!r} is not in table {table.name!r} ({where}: {table.partitions} asked)",
    )


def _fail_as(failure: Failure, outcome: Outcome) -> Answer:
    return failure_response(failure), outcome


def partition_list(text: str, count: int) -> list[int] | Failure:
    try:
        parts = sorted({int(p) for p in text.split(",")})
    except ValueError:
        return Failure(FailureReason.BAD_REQUEST, f"partitions={text!r} is not a list of ints")
    if not parts or parts[0] < 0 or parts[-1] >= count:
        return Failure(FailureReason.BAD_REQUEST, f"partitions must be in 0..{count - 1}")
    return parts


def _fail(failure: Failure) -> Answer:
    return failure_response(failure), Outcome.ERROR
