"""Multi-get (`POST /v1/tables/{table}/multi-get`), and the probes other nodes send with it.

A multi-get reads through the one read loop (`readloop`, by way of `gather`): this node's
replicas are read directly; each other node gets ONE request for its partitions, all in
parallel; standbys stand in for an active that cannot answer, within the budget. On a table
of partitioner `any`, or whose changelog holds misplaced records, keys missing from their
own partition are then looked for in every other one (`elsewhere.looks_everywhere`), by
*probes*: the same endpoint with the internal `partitions=` parameter and the keys' wire
bytes in the body, which a node answers from those partitions only (`_probe`). The answers
carry `offsets` (partition -> the changelog offset its replica had reached) and `standby`
(whether any part came from a standby), merged from the nodes' answers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import orjson

from sparkiq.core.queries import Failure, FailureReason
from sparkiq.core.tables import TableDef
from sparkiq.core.topology import TopicPartition
from sparkiq.http.messages.params import Params, codecs, parse_key_json
from sparkiq.http.messages.responses import Answer, Outcome, Response, failure_response
from sparkiq.http.reads.apiparts import ApiParts
from sparkiq.http.reads.elsewhere import looks_everywhere, probed_partitions
from sparkiq.http.reads.gather import Gathered, decode_wire_keys, gather, probe_items
from sparkiq.http.reads.locate import Call
from sparkiq.http.reads.windows import per_window


async def multi_get(
    api: ApiParts, table: TableDef, params: Params, call: Call, body: bytes
) -> Answer:
    settings = api.settings
    if table.is_windowed:
        return _fail(per_window(table, "a multi-get"))
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
    parts = probed_partitions(params, table, call, 'send {"keys": [...]} instead')
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


def _fail(failure: Failure) -> Answer:
    return failure_response(failure), Outcome.ERROR
