"""The engine under multi-get (`multiget`) and lookups outside a key's own partition
(`elsewhere`): a set of keys read where they are stored, one request per node.

A *plan* maps partitions to the keys (indices into the request's keys) to read there. The
read loop (`readloop`) reads each partition from this node's replica or asks the node that
holds it, ONE request per node, all in parallel, and falls back to standbys within the
budget; this module says what to read and what to ask, and merges what comes back.

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

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import orjson

from sparkiq.core import positions
from sparkiq.core.queries import Failure, FailureReason
from sparkiq.core.tables import TableDef
from sparkiq.core.topology import TopicPartition
from sparkiq.http.messages.params import AFTER_PARAM, codecs, decode_cursor, encode_cursor
from sparkiq.http.messages.responses import Answer, Outcome, Response
from sparkiq.http.reads.apiparts import ApiParts
from sparkiq.http.reads.locate import Call, LocalReplica
from sparkiq.http.reads.readloop import read_partitions

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
        return {
            "offsets": offsets,
            "token": positions.encode(self.offsets),
            "standby": self.standby,
        }


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
    """Read every key of `plan` in its partitions (`readloop`); a failure's answer if that
    cannot be done.

    Home reads (`probing` False) ask other nodes with the public multi-get, whose body
    needs the keys as the caller gave them (`public_keys`); each key is in one partition of
    the plan then. Probes send wire keys. Hits are added to `into` if given.
    """
    got = into if into is not None else Gathered()
    pending = {tp: ix for tp, ix in plan.items() if ix}
    reads = _PlanReads(api.view.url, table, wires, pending, call, public_keys, probing, got)
    done = await read_partitions(api, call, pending, reads)
    return got if done is None else done


class _PlanReads:
    """The reads of a plan's keys: local multi-gets, and asks of other nodes (`Reads`)."""

    def __init__(
        self,
        node: str,
        table: TableDef,
        wires: Sequence[bytes],
        plan: Plan,
        call: Call,
        public_keys: Sequence[object],
        probing: bool,
        got: Gathered,
    ) -> None:
        self._node = node
        self._table = table
        self._wires = wires
        self._plan = plan
        self._call = call
        self._public_keys = public_keys
        self._probing = probing
        self._got = got
        self._codec, value_codec = codecs(table)
        self._render_value = value_codec.render

    def local(self, tp: TopicPartition, replica: LocalReplica) -> None:
        wires, codec, got = self._wires, self._codec, self._got
        indices = self._plan[tp]
        values = replica.store.multi_get([codec.wire_to_store(wires[i]) for i in indices])
        p = tp[1]
        for i, value in zip(indices, values, strict=True):
            if value is not None:
                hit = Hit(
                    self._render_value(value), p, replica.offset, self._node, replica.is_standby
                )
                got.hits[i][p] = hit
        got.outcomes.add(Outcome.STANDBY if replica.is_standby else Outcome.LOCAL)
        got.sources.local(p, replica)

    def request(self, tps: Sequence[TopicPartition]) -> tuple[str, str, bytes | None]:
        indices = _asked(tps, self._plan)
        call = self._call
        if self._probing:
            body = encode_wire_keys([self._wires[i] for i in indices])
            parts = ",".join(str(p) for p in sorted({tp[1] for tp in tps}))
            target = f"/v1/tables/{quote(self._table.name, safe='')}/multi-get?partitions={parts}"
            if call.max_lag is not None:
                target += f"&max_lag={call.max_lag}"
            if call.after is not None:
                target += f"&{AFTER_PARAM}={positions.encode(call.after)}"
            return "POST", target, body
        return "POST", call.target, orjson.dumps({"keys": [self._public_keys[i] for i in indices]})

    def take(self, url: str, tps: Sequence[TopicPartition], answer: Response) -> Answer | None:
        if answer.status != 200:
            return answer, Outcome.FORWARDED  # the owner's failure, as it said it
        _take(self._got, orjson.loads(answer.body), tps, self._plan, url, probing=self._probing)
        return None


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
