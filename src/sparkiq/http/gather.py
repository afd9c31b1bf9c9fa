"""Reads keys where they are stored, across nodes: the loop behind multi-get and behind
lookups that look past a key's own partition.

A *plan* maps partitions to the keys (indices into the request's keys) to read there. Each
partition is read from this node's replica, or asked of the node that owns it: ONE request
per node, all in parallel, carrying the hop header. Partitions that no replica can answer
yet wait for a change of the view, within the budget. A partition whose owner is unreachable
or answers 503 is read from a local stand-in within the lag bound if this node has one, else
asked of its other standbys (`fallback_lag`, as `failover` does for single keys).

Two kinds of request go to other nodes:

- a *home* read is the public multi-get (`{"keys": [...]}`): the owner finds each key's
  partition with the table's partitioner, as any node would;
- a *probe* is internal (only accepted from another node): `partitions=` names the
  partitions to read and the body holds the keys' wire bytes (`{"wire_keys": [base64url]}`),
  so a key of any format reaches the other node byte for byte. Every key is read in every
  listed partition, and each item says where it was found (`partition`, `offset`, `node`,
  `standby`; the lowest partition when several hold it).

Probes find records that their producer put in another partition than the table's
partitioner gives their keys (`sparkiq.node.restore.batches`), and every record of a table whose
placement is unknown (partitioner `any`).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import orjson

from sparkiq.core.queries import Failure, FailureReason
from sparkiq.core.tables import TableDef
from sparkiq.core.topology import TopicPartition
from sparkiq.http.forward import Unreachable
from sparkiq.http.locate import Ask, Call, LocalReplica, PartitionRoutes, fallback_target
from sparkiq.http.params import codecs, decode_cursor, encode_cursor
from sparkiq.http.parts import ApiParts
from sparkiq.http.responses import Answer, Outcome, Response, failed

Plan = Mapping[TopicPartition, Sequence[int]]


@dataclass(frozen=True, slots=True)
class Hit:
    """A key found in one partition: its rendered value and the replica that had it."""

    value: object
    partition: int
    offset: int | None
    node: str
    standby: bool


@dataclass
class Sources:
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


@dataclass
class Gathered:
    """What reads of a plan found: per key index, the partitions that hold the key."""

    hits: dict[int, dict[int, Hit]] = field(default_factory=lambda: defaultdict(dict))
    sources: Sources = field(default_factory=Sources)
    outcomes: set[Outcome] = field(default_factory=set)

    def best(self, index: int, home: int | None = None) -> Hit | None:
        """The key's answer: from its home partition if that holds it, else from the lowest
        partition that does (a key in several partitions has no order between them)."""
        found = self.hits.get(index)
        if not found:
            return None
        if home is not None and home in found:
            return found[home]
        return found[min(found)]

    def outcome(self) -> Outcome:
        """The metrics outcome of the answer these reads make (`assembled_outcome`)."""
        return assembled_outcome(self.outcomes)


def assembled_outcome(outcomes: set[Outcome]) -> Outcome:
    """The metrics outcome of an answer assembled from several replicas."""
    for outcome in (Outcome.FORWARDED, Outcome.STANDBY):
        if outcome in outcomes:
            return outcome
    return Outcome.LOCAL


def encode_wire_keys(wires: Sequence[bytes]) -> bytes:
    """A probe's body."""
    return orjson.dumps({"wire_keys": [encode_cursor(w) for w in wires]})


def decode_wire_keys(body: bytes) -> list[bytes] | Failure:
    """The wire keys of a probe's body."""
    try:
        doc: Any = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return Failure(FailureReason.BAD_REQUEST, f"body is not JSON: {exc}")
    raw = doc.get("wire_keys") if isinstance(doc, dict) else None
    if not isinstance(raw, list) or not all(isinstance(k, str) for k in raw):
        return Failure(FailureReason.BAD_REQUEST, 'a probe\'s body is {"wire_keys": [...]}')
    wires: list[bytes] = []
    for text in raw:
        wire = decode_cursor(text)
        if isinstance(wire, Failure):
            return wire
        wires.append(wire)
    return wires


def probe_items(table: TableDef, wires: Sequence[bytes], got: Gathered) -> list[dict[str, object]]:
    """A probe's answer items: each key with where it was found (partition null: nowhere)."""
    render_key = codecs(table)[0].render
    items: list[dict[str, object]] = []
    for i, wire in enumerate(wires):
        hit = got.best(i)
        item: dict[str, object] = {"key": render_key(wire), "value": None, "partition": None}
        if hit is not None:
            item.update(
                value=hit.value,
                partition=hit.partition,
                offset=hit.offset,
                node=hit.node,
                standby=hit.standby,
            )
        items.append(item)
    return items


async def gather(
    api: ApiParts,
    table: TableDef,
    wires: Sequence[bytes],
    plan: Plan,
    call: Call,
    *,
    probing: bool,
    public_keys: Sequence[object] = (),
    into: Gathered | None = None,
) -> Gathered | Answer:
    """Read every key of `plan` in its partitions; a failure's answer if that cannot be done.

    Home reads (`probing` False) ask other nodes with the public multi-get, whose body
    needs the keys as the caller gave them (`public_keys`); each key is in one partition of
    the plan then. Probes send wire keys. Hits are added to `into` if given.
    """
    got = into if into is not None else Gathered()
    locator = api.locator
    codec, value_codec = codecs(table)
    render_value = value_codec.render
    node = api.view.url
    pending: dict[TopicPartition, Sequence[int]] = {tp: ix for tp, ix in plan.items() if ix}
    routes = PartitionRoutes(locator, call)
    while pending:
        remote: dict[Ask, list[TopicPartition]] = defaultdict(list)
        waiting: dict[TopicPartition, Sequence[int]] = {}
        for tp, indices in pending.items():
            found = routes.route(tp)
            if isinstance(found, LocalReplica):
                values = found.store.multi_get([codec.wire_to_store(wires[i]) for i in indices])
                p = tp[1]
                for i, value in zip(indices, values, strict=True):
                    if value is not None:
                        hit = Hit(render_value(value), p, found.offset, node, found.is_standby)
                        got.hits[i][p] = hit
                got.outcomes.add(Outcome.STANDBY if found.is_standby else Outcome.LOCAL)
                got.sources.local(p, found)
            elif isinstance(found, Ask):
                remote[found].append(tp)
            elif found is None:
                waiting[tp] = indices
            else:
                return failed(found)
        if remote:
            asks = list(remote)
            asking = [
                _ask(
                    api,
                    table,
                    ask,
                    remote[ask],
                    pending,
                    wires,
                    public_keys,
                    call,
                    routes.bound,
                    probing=probing,
                )
                for ask in asks
            ]
            # One node to ask (the common case with two nodes): no task to make for it.
            answers = [await asking[0]] if len(asking) == 1 else await asyncio.gather(*asking)
            for ask, answer in zip(asks, answers, strict=True):
                tps = remote[ask]
                if answer is None or (isinstance(answer, Response) and answer.status == 503):
                    # Try these partitions again after a pause, from a stand-in if any.
                    waiting.update((tp, pending[tp]) for tp in tps)
                    routes.unanswered(ask, tps)
                    continue
                if isinstance(answer, Failure):
                    return failed(answer)
                if answer.status != 200:
                    return answer, Outcome.FORWARDED  # the owner's failure, as it said it
                _take(got, orjson.loads(answer.body), tps, pending, ask.url, probing=probing)
        pending = waiting
        if pending and not await locator.wait(call, api.settings.reconnect_pause_s):
            return failed(locator.gave_up(call, routes.last_why))
    return got


def _asked(
    tps: Sequence[TopicPartition], pending: Mapping[TopicPartition, Sequence[int]]
) -> list[int]:
    """The key indices asked of a node for `tps`: each once, in plan order."""
    return list(dict.fromkeys(i for tp in tps for i in pending[tp]))


def _take(
    got: Gathered,
    doc: dict[str, Any],
    tps: Sequence[TopicPartition],
    pending: Mapping[TopicPartition, Sequence[int]],
    url: str,
    *,
    probing: bool,
) -> None:
    """Add another node's answer for `tps` to `got`."""
    indices = _asked(tps, pending)
    got.sources.remote(doc)
    got.outcomes.add(Outcome.FORWARDED)
    offsets = doc.get("offsets", {})
    standby = bool(doc.get("standby"))
    if probing:
        for i, item in zip(indices, doc["items"], strict=True):
            p = item.get("partition")
            if p is not None:
                got.hits[i][int(p)] = Hit(
                    item["value"],
                    int(p),
                    item.get("offset"),
                    str(item.get("node") or url),
                    bool(item.get("standby")),
                )
        return
    home = {i: tp[1] for tp in tps for i in pending[tp]}
    for i, item in zip(indices, doc["items"], strict=True):
        if item["value"] is not None:
            p = home[i]
            got.hits[i][p] = Hit(item["value"], p, offsets.get(str(p)), url, standby)


async def _ask(
    api: ApiParts,
    table: TableDef,
    ask: Ask,
    tps: Sequence[TopicPartition],
    pending: Mapping[TopicPartition, Sequence[int]],
    wires: Sequence[bytes],
    public_keys: Sequence[object],
    call: Call,
    bound: int,
    *,
    probing: bool,
) -> Response | Failure | None:
    """Ask the node `ask` names for the keys of `tps` (`send_ask`)."""
    indices = _asked(tps, pending)
    if probing:
        body = encode_wire_keys([wires[i] for i in indices])
        parts = ",".join(str(p) for p in sorted({tp[1] for tp in tps}))
        target = f"/v1/tables/{quote(table.name, safe='')}/multi-get?partitions={parts}"
        if call.max_lag is not None:
            target += f"&max_lag={call.max_lag}"
    else:
        body = orjson.dumps({"keys": [public_keys[i] for i in indices]})
        target = call.target
    return await send_ask(api, ask, "POST", target, body, call, bound)


async def send_ask(
    api: ApiParts, ask: Ask, method: str, target: str, body: bytes | None, call: Call, bound: int
) -> Response | Failure | None:
    """Send a read of some partitions to the node `ask` names: to their active as it is
    (None: unreachable, after a pause, worth another try), or to a stand-in with the internal
    lag `bound` (own replica or 503 at once; None: unreachable)."""
    if not ask.as_stand_in:
        return await api.locator.forward(
            ask.url, method, target, body, call, on_unreachable=api.metrics.forward_failed
        )
    answer = await api.locator.ask(
        ask.url,
        method,
        fallback_target(target, bound),
        body,
        call,
        api.settings.active_timeout_s,
    )
    if isinstance(answer, Unreachable):
        api.metrics.forward_failed(answer)
        return None
    return answer
