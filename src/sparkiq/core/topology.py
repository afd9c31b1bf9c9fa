"""Who holds what: the cluster map every serving node receives with its assignment.

A *partition* here is a changelog topic partition, `(topic, partition)`. Each has one active
node (serves reads), standbys (follow the changelog, may answer within a lag bound) and
warming nodes (catching up before the active role moves to them). Node identity is the
node's advertised URL. Everything here is a plain value with a compact JSON encoding, since
it travels in the consumer group's subscription and assignment user data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from sparkiq.core.queries import ReplicaRole
from sparkiq.core.tpruns import Numbering, from_pair_run, from_value_run, pair_run, value_run

TopicPartition = tuple[str, int]

# What a member's subscription says it reads: 2 = the compact map encoding
# (`sparkiq.core.mapcodec`) and maps by reference; members of version 1 sent no "v" or 1
# and read only `ClusterMap.to_bytes` (the leader writes that while any of them is in the
# group: a rolling upgrade).
PROTOCOL_VERSION = 2
# The version `ClusterMap.to_bytes` writes: the whole map in plain JSON.
LEGACY_MAP_VERSION = 1


def _tp_key(tp: TopicPartition) -> str:
    return f"{tp[0]}:{tp[1]}"


def _tp_parse(text: str) -> TopicPartition:
    topic, _, part = text.rpartition(":")
    return topic, int(part)


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """What a node says of itself when it joins: its URL, what it holds, how far behind."""

    url: str
    actives: frozenset[TopicPartition] = frozenset()
    standbys: frozenset[TopicPartition] = frozenset()
    # Offsets behind the changelog end for every partition the node has a store for
    # (including stores left on disk from earlier runs); absent = nothing local.
    lags: Mapping[TopicPartition, int] = field(default_factory=dict)
    # Records in a partition that the table's partitioner puts elsewhere, by partition
    # (only partitions with some): every node must know them to look further on a miss.
    misplaced: Mapping[TopicPartition, int] = field(default_factory=dict)
    # The node's id (kept in its state dir, so a restart is the same node) and when this
    # process started (epoch ms): of two nodes that advertise one URL, the one that started
    # first keeps it (`assignment`).
    instance: str = ""
    started_ms: int = 0
    # The group protocol this member speaks (PROTOCOL_VERSION; 1 for members before it).
    protocol: int = PROTOCOL_VERSION

    def to_bytes(self, *, compact: bool = False) -> bytes:
        """The subscription user data: plain JSON that every version's leader reads, or
        (*compact*) topic names once and partitions as ``topic index, partition[, value]``
        runs, a third of the size, for a leader of protocol 2 (`from_bytes` reads both)."""
        if compact:
            return self._compact_bytes()
        return orjson.dumps(
            {
                "v": self.protocol,
                "url": self.url,
                "instance": self.instance,
                "started_ms": self.started_ms,
                "actives": sorted(_tp_key(tp) for tp in self.actives),
                "standbys": sorted(_tp_key(tp) for tp in self.standbys),
                "lags": {_tp_key(tp): lag for tp, lag in self.lags.items()},
                "misplaced": {_tp_key(tp): n for tp, n in self.misplaced.items()},
            }
        )

    def _compact_bytes(self) -> bytes:
        topics = Numbering()
        doc: dict[str, Any] = {
            "v": self.protocol,
            "url": self.url,
            "instance": self.instance,
            "started_ms": self.started_ms,
            "a": pair_run(topics, self.actives),
            "s": pair_run(topics, self.standbys),
            "l": value_run(topics, self.lags.items()),
            "m": value_run(topics, self.misplaced.items()),
        }
        doc["topics"] = topics.items  # last: the runs above name them
        return orjson.dumps(doc)

    @classmethod
    def from_bytes(cls, data: bytes) -> MemberInfo:
        raw: Any = orjson.loads(data)
        if "topics" in raw:
            return cls._from_compact(raw)
        return cls(
            url=str(raw["url"]),
            actives=frozenset(_tp_parse(t) for t in raw.get("actives", [])),
            standbys=frozenset(_tp_parse(t) for t in raw.get("standbys", [])),
            lags={_tp_parse(k): int(v) for k, v in raw.get("lags", {}).items()},
            misplaced={_tp_parse(k): int(v) for k, v in raw.get("misplaced", {}).items()},
            instance=str(raw.get("instance", "")),
            started_ms=int(raw.get("started_ms", 0)),
            protocol=int(raw.get("v", LEGACY_MAP_VERSION)),
        )

    @classmethod
    def _from_compact(cls, raw: Any) -> MemberInfo:
        names = [str(t) for t in raw["topics"]]
        return cls(
            url=str(raw["url"]),
            actives=from_pair_run(names, raw["a"]),
            standbys=from_pair_run(names, raw["s"]),
            lags=from_value_run(names, raw["l"]),
            misplaced=from_value_run(names, raw["m"]),
            instance=str(raw.get("instance", "")),
            started_ms=int(raw.get("started_ms", 0)),
            protocol=int(raw["v"]),
        )


@dataclass(frozen=True, slots=True)
class PartitionOwners:
    """The nodes (by URL) holding one partition."""

    active: str | None
    standbys: tuple[str, ...] = ()
    warming: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterMap:
    """The whole assignment of one group generation, identical on every member."""

    generation: int = -1
    owners: Mapping[TopicPartition, PartitionOwners] = field(default_factory=dict)
    # url -> lags that node reported when it joined
    nodes: Mapping[str, Mapping[TopicPartition, int]] = field(default_factory=dict)
    # Misplaced records per partition, the most any member reported (see MemberInfo).
    misplaced: Mapping[TopicPartition, int] = field(default_factory=dict)
    # Nodes that advertised a URL another (earlier) node has: node id -> that URL. They
    # hold nothing; each learns here that it was refused.
    refused: Mapping[str, str] = field(default_factory=dict)

    def owner_of(self, tp: TopicPartition) -> PartitionOwners | None:
        return self.owners.get(tp)

    def actives_of(self, url: str) -> frozenset[TopicPartition]:
        return frozenset(tp for tp, o in self.owners.items() if o.active == url)

    def standbys_of(self, url: str) -> frozenset[TopicPartition]:
        return frozenset(tp for tp, o in self.owners.items() if url in o.standbys)

    def warming_of(self, url: str) -> frozenset[TopicPartition]:
        return frozenset(tp for tp, o in self.owners.items() if url in o.warming)

    def urls(self) -> frozenset[str]:
        found = set(self.nodes)
        for o in self.owners.values():
            if o.active:
                found.add(o.active)
            found.update(o.standbys)
            found.update(o.warming)
        return frozenset(found)

    def to_bytes(self) -> bytes:
        """The map in plain JSON (protocol 1): what members before protocol 2 read. The
        compact encoding is `sparkiq.core.mapcodec.encode_map`."""
        return orjson.dumps(
            {
                "v": LEGACY_MAP_VERSION,
                "generation": self.generation,
                "owners": {
                    _tp_key(tp): [o.active, list(o.standbys), list(o.warming)]
                    for tp, o in self.owners.items()
                },
                "nodes": {
                    url: {_tp_key(tp): lag for tp, lag in lags.items()}
                    for url, lags in self.nodes.items()
                },
                "misplaced": {_tp_key(tp): n for tp, n in self.misplaced.items()},
                "refused": dict(self.refused),
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> ClusterMap:
        raw: Any = orjson.loads(data)
        return cls(
            generation=int(raw.get("generation", -1)),
            owners={
                _tp_parse(k): PartitionOwners(v[0], tuple(v[1]), tuple(v[2]))
                for k, v in raw.get("owners", {}).items()
            },
            nodes={
                url: {_tp_parse(k): int(v) for k, v in lags.items()}
                for url, lags in raw.get("nodes", {}).items()
            },
            misplaced={_tp_parse(k): int(v) for k, v in raw.get("misplaced", {}).items()},
            refused={str(k): str(v) for k, v in raw.get("refused", {}).items()},
        )

    def with_generation(self, generation: int) -> ClusterMap:
        return ClusterMap(
            generation=generation,
            owners=self.owners,
            nodes=self.nodes,
            misplaced=self.misplaced,
            refused=self.refused,
        )


# A module constant: on Python 3.11 `ReplicaRole.ACTIVE` goes through EnumType.__getattr__.
_ACTIVE = ReplicaRole.ACTIVE


@dataclass(slots=True)
class Placement:
    """Where one changelog partition lives, seen from this node. Treat it as immutable.

    Not a frozen dataclass: a node builds one for every read it does not answer from its
    own active replica, and a frozen one's __init__ (an object.__setattr__ per field)
    measured ~2.8x the cost of this one's (2.1 against 0.76 us).
    """

    tp: TopicPartition
    active: str | None  # URL of the active node (may be this node's own URL); None = unassigned
    standbys: tuple[str, ...] = ()
    local_role: ReplicaRole | None = None  # this node's replica, if it has one
    local_ready: bool = False  # True once the local replica has restored (may serve)
    local_offset: int | None = None  # next changelog offset the local replica will apply
    local_lag: int | None = None  # offsets behind the changelog end
    # False while local_lag is measured against no real end yet (a replica just assigned has
    # not fetched: its lag reads 0 whatever the changelog holds); such a replica never
    # answers in place of the active.
    local_lag_known: bool = True

    @property
    def is_local_active(self) -> bool:
        return self.local_role is _ACTIVE and self.local_ready
