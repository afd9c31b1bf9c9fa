"""The endpoints that span partitions: multi-get and range, scattered and gathered.

Keys (multi-get) or partitions (range) are grouped by who answers them: this node's replicas
are read directly; each other owner gets ONE request, all in parallel, carrying the hop
header. Groups with no answering replica wait for a change of the view, within the budget.
Range pages merge every partition's items in store-key order; owners are asked with the
internal `partitions=` parameter (only accepted from another node) and return each item's
store key so the merge does not depend on how keys render. Both answers carry `offsets`
(partition -> the changelog offset its replica had reached) and `standby` (whether any part
came from a standby), merged from the owners' answers. A partition whose owner is
unreachable or answers 503 is read from a local stand-in within the lag bound if this node
has one; multi-get then asks the partition's other standbys (`fallback_lag`, as
`failover` does for single keys), range does not.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import orjson

from sparkiq.http.forward import Unreachable
from sparkiq.http.locate import Call, LocalReplica, fallback_target
from sparkiq.http.params import (
    Params,
    codecs,
    decode_cursor,
    encode_cursor,
    int_param,
    parse_key_json,
    parse_key_text,
)
from sparkiq.http.responses import Answer, Outcome, Response, failure_response
from sparkiq.partitioner import partition_for
from sparkiq.queries import Failure, FailureReason
from sparkiq.serde import split_window_store_key
from sparkiq.tables import TableDef
from sparkiq.topology import TopicPartition

if TYPE_CHECKING:
    from sparkiq.http.api import HttpApi

RANGE_PARAMS = frozenset(("from", "to", "prefix", "limit", "cursor", "max_lag", "partitions"))

# Window starts of a windowed table's store keys: the 8 bytes after the key.
_ALL_WINDOWS = b"\xff" * 8


@dataclass
class _Sources:
    """What the replicas behind an answer had reached: offset per partition, any standby."""

    offsets: dict[int, int | None] = field(default_factory=dict)
    standby: bool = False

    def local(self, partition: int, replica: LocalReplica) -> None:
        self.offsets[partition] = replica.offset
        self.standby = self.standby or replica.is_standby

    def remote(self, doc: dict[str, Any]) -> None:
        """Merge the `offsets` and `standby` of another node's answer."""
        for partition, offset in doc.get("offsets", {}).items():
            self.offsets[int(partition)] = offset
        self.standby = self.standby or bool(doc.get("standby"))

    def fields(self) -> dict[str, object]:
        offsets = {str(p): o for p, o in sorted(self.offsets.items())}
        return {"offsets": offsets, "standby": self.standby}


def _best(outcomes: set[Outcome]) -> Outcome:
    """The metrics outcome of an answer assembled from several replicas."""
    for outcome in (Outcome.FORWARDED, Outcome.STANDBY):
        if outcome in outcomes:
            return outcome
    return Outcome.LOCAL


# -- multi-get ---------------------------------------------------------------------------------


async def multi_get(
    api: HttpApi, table: TableDef, params: Params, call: Call, body: bytes
) -> Answer:
    settings = api.settings
    if len(body) > settings.max_body_bytes:
        return _fail(
            Failure(FailureReason.TOO_LARGE, f"body is over {settings.max_body_bytes} bytes")
        )
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
    codec, value_codec = codecs(table)
    wires: list[bytes] = []
    by_tp: dict[TopicPartition, list[int]] = defaultdict(list)
    for i, raw in enumerate(raw_keys):
        wire = parse_key_json(table, raw, i, settings.max_key_bytes)
        if isinstance(wire, Failure):
            return _fail(wire)
        wires.append(wire)
        by_tp[(table.topic, partition_for(wire, table.partitions))].append(i)

    values: list[object] = [None] * len(wires)
    outcomes: set[Outcome] = set()
    sources = _Sources()
    render_value = value_codec.render
    pending = dict(by_tp)
    last_why = ""
    failed_actives: set[TopicPartition] = set()  # stand-ins may answer for these
    tried: dict[TopicPartition, set[str]] = defaultdict(set)  # standbys asked in vain
    bound = call.stand_in_bound(settings)
    while pending:
        # (url, asked as a stand-in) -> partitions
        remote: dict[tuple[str, bool], list[TopicPartition]] = defaultdict(list)
        waiting: dict[TopicPartition, list[int]] = {}
        for tp, indices in pending.items():
            if call.fallback_lag is not None:  # asked as a stand-in: own replicas or 503
                found: LocalReplica | str | Failure = api.locator.local_only(tp, call.fallback_lag)
                if isinstance(found, Failure):
                    return _fail(found)
            else:
                found = api.locator.resolve_or_stand_in(
                    tp, call, active_failed=tp in failed_actives
                )
            if isinstance(found, LocalReplica):
                got = found.store.multi_get([codec.wire_to_store(wires[i]) for i in indices])
                for i, value in zip(indices, got, strict=True):
                    values[i] = None if value is None else render_value(value)
                outcomes.add(Outcome.STANDBY if found.is_standby else Outcome.LOCAL)
                sources.local(tp[1], found)
            elif isinstance(found, str):
                stand_in = None
                if tp in failed_actives:
                    untried = [u for u in api.locator.standby_urls(tp) if u not in tried[tp]]
                    stand_in = untried[0] if untried else None
                    if stand_in is None:
                        tried[tp].clear()  # all asked: the active again, then them again
                if stand_in is None:
                    remote[(found, False)].append(tp)
                else:
                    remote[(stand_in, True)].append(tp)
            else:
                waiting[tp] = indices
                last_why = found.message
        if remote:
            asks = list(remote)
            answers = await asyncio.gather(
                *(
                    _ask_multi(
                        api,
                        url,
                        [i for tp in remote[(url, as_stand_in)] for i in pending[tp]],
                        raw_keys,
                        call,
                        bound if as_stand_in else None,
                    )
                    for url, as_stand_in in asks
                )
            )
            for (url, as_stand_in), answer in zip(asks, answers, strict=True):
                tps = remote[(url, as_stand_in)]
                indices = [i for tp in tps for i in pending[tp]]
                if answer is None or (isinstance(answer, Response) and answer.status == 503):
                    # Try these partitions again after a pause, from a stand-in if any.
                    waiting.update((tp, pending[tp]) for tp in tps)
                    if as_stand_in:
                        for tp in tps:
                            tried[tp].add(url)
                    else:
                        failed_actives.update(tps)
                    last_why = f"{url} is unreachable or unavailable"
                    continue
                if isinstance(answer, Failure):
                    return _fail(answer)
                if answer.status != 200:
                    return answer, Outcome.FORWARDED  # the owner's failure, as it said it
                doc = orjson.loads(answer.body)
                for i, item in zip(indices, doc["items"], strict=True):
                    values[i] = item["value"]
                sources.remote(doc)
                outcomes.add(Outcome.FORWARDED)
        pending = waiting
        if pending and not await api.locator.wait(call, settings.reconnect_pause_s):
            return _fail(api.locator.gave_up(call, last_why))
    items = [
        {"key": codec.render(wire), "value": value}
        for wire, value in zip(wires, values, strict=True)
    ]
    body = orjson.dumps({"items": items, **sources.fields()})
    return Response(200, body), _best(outcomes)


async def _ask_multi(
    api: HttpApi,
    url: str,
    indices: list[int],
    raw_keys: list[Any],
    call: Call,
    stand_in_bound: int | None,
) -> Response | Failure | None:
    """Ask `url` for the keys at `indices`; as a stand-in (own replicas only) with a bound."""
    body = orjson.dumps({"keys": [raw_keys[i] for i in indices]})
    target = call.target
    if stand_in_bound is not None:
        target = fallback_target(target, stand_in_bound)
        answer = await api.locator.ask(
            url, "POST", target, body, call, api.settings.active_timeout_s
        )
        if isinstance(answer, Unreachable):
            api.metrics.forward_failed(answer)
            return None
        return answer
    return await api.locator.forward(
        url, "POST", target, body, call, on_unreachable=api.metrics.forward_failed
    )


# -- range -------------------------------------------------------------------------------------


async def range_scan(api: HttpApi, table: TableDef, params: Params, call: Call) -> Answer:
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
    bounds = _range_bounds(api, table, params)
    if isinstance(bounds, Failure):
        return _fail(bounds)
    lo, hi, prefix, after = bounds
    if internal:
        parts = _partition_list(params["partitions"], table.partitions)
        if isinstance(parts, Failure):
            return _fail(parts)
    else:
        parts = list(range(table.partitions))

    fetch = limit + 1  # one more than the page: tells whether there is a next page
    collected: list[tuple[bytes, dict[str, object]]] = []
    outcomes: set[Outcome] = set()
    sources = _Sources()
    pending = [(table.topic, p) for p in parts]
    last_why = ""
    failed_actives: set[TopicPartition] = set()  # a local stand-in may answer for these
    while pending:
        remote: dict[str, list[TopicPartition]] = defaultdict(list)
        waiting: list[TopicPartition] = []
        for tp in pending:
            found = api.locator.resolve_or_stand_in(tp, call, active_failed=tp in failed_actives)
            if isinstance(found, LocalReplica):
                rows = found.store.scan(lo=lo, hi=hi, prefix=prefix, after=after, limit=fetch)
                collected.extend(_render_rows(table, rows))
                outcomes.add(Outcome.STANDBY if found.is_standby else Outcome.LOCAL)
                sources.local(tp[1], found)
            elif isinstance(found, str):
                remote[found].append(tp)
            else:
                waiting.append(tp)
                last_why = found.message
        if remote:
            urls = list(remote)
            answers = await asyncio.gather(
                *(_ask_range(api, url, table, params, remote[url], fetch, call) for url in urls)
            )
            for url, answer in zip(urls, answers, strict=True):
                if answer is None or (isinstance(answer, Response) and answer.status == 503):
                    waiting.extend(remote[url])
                    failed_actives.update(remote[url])
                    last_why = f"owner {url} is unreachable or unavailable"
                    continue
                if isinstance(answer, Failure):
                    return _fail(answer)
                if answer.status != 200:
                    return answer, Outcome.FORWARDED
                doc = orjson.loads(answer.body)
                for item in doc["items"]:
                    store_key = decode_cursor(item.pop("store_key"))
                    assert isinstance(store_key, bytes)
                    collected.append((store_key, item))
                sources.remote(doc)
                outcomes.add(Outcome.FORWARDED)
        pending = waiting
        if pending and not await api.locator.wait(call, settings.reconnect_pause_s):
            return _fail(api.locator.gave_up(call, last_why))

    # Each key lives in exactly one partition, so store keys never repeat across partitions.
    collected.sort(key=lambda pair: pair[0])
    page = collected[:limit]
    next_cursor = encode_cursor(page[-1][0]) if len(collected) > limit else None
    if internal:
        items = [dict(item, store_key=encode_cursor(sk)) for sk, item in page]
    else:
        items = [item for _, item in page]
    body = orjson.dumps({"items": items, "next_cursor": next_cursor, **sources.fields()})
    return Response(200, body), _best(outcomes)


def _range_bounds(
    api: HttpApi, table: TableDef, params: Params
) -> tuple[bytes | None, bytes | None, bytes | None, bytes | None] | Failure:
    """from/to/prefix/cursor -> store-key bounds (lo, hi inclusive, prefix, after)."""
    codec = codecs(table)[0]
    limit = api.settings.max_key_bytes
    out: list[bytes | None] = []
    for name in ("from", "to", "prefix"):
        text = params.get(name)
        if text is None:
            out.append(None)
            continue
        wire = parse_key_text(table, text, limit)
        if isinstance(wire, Failure):
            return Failure(wire.reason, f"{name}: {wire.message}")
        out.append(codec.wire_to_store(wire))
    lo, hi, prefix = out
    if table.is_windowed and hi is not None:
        hi += _ALL_WINDOWS  # `to` names a key: include all of its windows
    after: bytes | None = None
    if "cursor" in params:
        cursor = decode_cursor(params["cursor"])
        if isinstance(cursor, Failure):
            return cursor
        after = cursor
    return lo, hi, prefix, after


def _partition_list(text: str, count: int) -> list[int] | Failure:
    try:
        parts = sorted({int(p) for p in text.split(",")})
    except ValueError:
        return Failure(FailureReason.BAD_REQUEST, f"partitions={text!r} is not a list of ints")
    if not parts or parts[0] < 0 or parts[-1] >= count:
        return Failure(FailureReason.BAD_REQUEST, f"partitions must be in 0..{count - 1}")
    return parts


def _render_rows(
    table: TableDef, rows: list[tuple[bytes, bytes]]
) -> list[tuple[bytes, dict[str, object]]]:
    codec, value_codec = codecs(table)
    render_value = value_codec.render
    if not table.is_windowed:
        return [
            (sk, {"key": codec.render(codec.store_to_wire(sk)), "value": render_value(v)})
            for sk, v in rows
        ]
    size = table.window_size_ms or 0
    out: list[tuple[bytes, dict[str, object]]] = []
    for sk, v in rows:
        key_store, start = split_window_store_key(sk)
        item: dict[str, object] = {
            "key": codec.render(codec.store_to_wire(key_store)),
            "start": start,
            "end": start + size,
            "value": render_value(v),
        }
        out.append((sk, item))
    return out


async def _ask_range(
    api: HttpApi,
    url: str,
    table: TableDef,
    params: Params,
    tps: list[TopicPartition],
    fetch: int,
    call: Call,
) -> Response | Failure | None:
    query = {k: v for k, v in params.items() if k not in ("limit", "partitions")}
    query["limit"] = str(fetch)
    query["partitions"] = ",".join(str(p) for _, p in tps)
    target = f"/v1/tables/{table.name}/range?{urlencode(query)}"
    return await api.locator.forward(
        url, "GET", target, None, call, on_unreachable=api.metrics.forward_failed
    )


def _fail(failure: Failure) -> Answer:
    return failure_response(failure), Outcome.ERROR
