"""The group's assignor: what a member sends when it joins, and what the leader sends back.

aiokafka runs `SparkiqAssignor` on every member of the group (`sparkiq.node.group.membership`
makes one per `GroupMember`): each member's subscription carries its `MemberInfo`; on the
leader, `assign` runs `sparkiq.node.group.assignment.assign` over every member and gives
each an assignment with no partitions and, as user data, the map inline or a reference to
it (`sparkiq.node.group.assignmentdata`), noting what the rebalance wrote
(`RebalanceBytes`); on every member, `on_assignment` reads its assignment and applies the
map or hands the reference on to be fetched.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from sparkiq.core.mapcodec import MapEncodingError, encode_map
from sparkiq.core.mapref import MapExchange, MapReference, digest_of
from sparkiq.core.topology import PROTOCOL_VERSION, ClusterMap, MemberInfo
from sparkiq.node.group import assignmentdata
from sparkiq.node.group.assignment import assign

log = logging.getLogger(__name__)

ASSIGNOR_NAME = "sparkiq"


@dataclass(frozen=True, slots=True)
class RebalanceBytes:
    """What the leader's last rebalance wrote through Kafka, in bytes of user data.

    `subscriptions`: every member's metadata as the leader received it; `assignments`: the
    user data of every member's assignment; `largest_assignment`; `map_bytes`: the encoded
    map (served over HTTP when `inline` is False, once per fetching member).
    """

    generation: int
    members: int
    partitions: int
    subscriptions: int
    assignments: int
    largest_assignment: int
    map_bytes: int
    inline: bool


class SparkiqAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """aiokafka assignor carrying `MemberInfo` in subscriptions and `ClusterMap` in assignments.

    One instance per `GroupMember` (aiokafka accepts instances as well as classes), since
    it needs that member's callbacks and settings.
    """

    name = ASSIGNOR_NAME
    version = 0

    def __init__(
        self,
        *,
        member_info: Callable[[], MemberInfo],
        on_map: Callable[[ClusterMap], None],
        generation: Callable[[], int],
        standby_replicas: int,
        acceptable_lag: int,
        unassigned_topics: Iterable[str] = (),
        global_topics: Callable[[], Iterable[str]] = tuple,
    ) -> None:
        self._member_info = member_info
        self._on_map = on_map
        self._generation = generation
        self._standby_replicas = standby_replicas
        self._acceptable_lag = acceptable_lag
        # Subscribed only to keep members in the group (the catalog): in no map, so their
        # partitions take no node's share of actives.
        self._unassigned = frozenset(unassigned_topics)
        # The changelogs of global tables, as this member's catalog knows them: when it is
        # the leader, their partitions go to every node.
        self._global_topics = global_topics
        # Where maps past the inline budget are served from (None: always inline).
        self.exchange: MapExchange | None = None
        self.inline_budget = assignmentdata.INLINE_BUDGET_BYTES
        # The map this member published as leader, by digest: applied without a fetch.
        self.published: tuple[str, ClusterMap] | None = None
        self.on_reference: Callable[[MapReference], None] = lambda ref: None
        self.last_rebalance: RebalanceBytes | None = None
        self.leader_reads_compact = False

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        # Compact once the group's leader has shown it reads protocol 2 (its last assignment
        # was in a form of protocol 2): a leader of protocol 1 reads only the plain form.
        info = self._member_info().to_bytes(compact=self.leader_reads_compact)
        return ConsumerProtocolMemberMetadata(self.version, sorted(topics), info)

    def assign(
        self, cluster: Any, member_metadata: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        members: dict[str, MemberInfo] = {}
        topics: set[str] = set()
        for member_id, meta in member_metadata.items():
            topics.update(meta.subscription)
            try:
                members[member_id] = MemberInfo.from_bytes(meta.user_data)
            except (ValueError, KeyError, TypeError) as exc:
                # A member of another sparkiq version or another application in the group:
                # it gets the map but holds nothing, so the rest of the group still works.
                log.warning("member %s sent unreadable user data (%s); ignoring it", member_id, exc)
        partitions = {
            t: len(cluster.partitions_for_topic(t) or ())
            for t in sorted(topics)
            if t not in self._unassigned
        }
        cluster_map = assign(
            members,
            partitions,
            standby_replicas=self._standby_replicas,
            acceptable_lag=self._acceptable_lag,
            generation=self._generation(),
            everywhere=frozenset(self._global_topics()),
        )
        user_data, encoded, is_inline = self._user_data(cluster_map, members, len(member_metadata))
        self.last_rebalance = RebalanceBytes(
            generation=cluster_map.generation,
            members=len(member_metadata),
            partitions=len(cluster_map.owners),
            subscriptions=sum(
                len(m.user_data or b"") + sum(len(t) for t in m.subscription)
                for m in member_metadata.values()
            ),
            assignments=len(user_data) * len(member_metadata),
            largest_assignment=len(user_data),
            map_bytes=len(encoded),
            inline=is_inline,
        )
        return {
            member_id: ConsumerProtocolMemberAssignment(self.version, [], user_data)
            for member_id in member_metadata
        }

    def _user_data(
        self, cluster_map: ClusterMap, members: Mapping[str, MemberInfo], count: int
    ) -> tuple[bytes, bytes, bool]:
        """The user data of every assignment, the encoded map, and whether it is inline."""
        if any(info.protocol < PROTOCOL_VERSION for info in members.values()):
            # A member of protocol 1 (a rolling upgrade) reads only the whole map in JSON.
            legacy = cluster_map.to_bytes()
            return legacy, legacy, True
        encoded = encode_map(cluster_map)
        exchange = self.exchange
        if exchange is None or assignmentdata.fits_inline(count, len(encoded), self.inline_budget):
            return assignmentdata.inline(encoded), encoded, True
        digest = digest_of(encoded)
        exchange.publish(cluster_map.generation, digest, encoded)
        self.published = (digest, cluster_map)
        reference = MapReference(cluster_map.generation, digest, len(encoded), exchange.url)
        return assignmentdata.by_reference(reference), encoded, False

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        try:
            got = assignmentdata.read(assignment.user_data)
        except MapEncodingError as exc:
            log.error("cannot read the cluster map in this assignment (%s); keeping the old", exc)
            return
        self.leader_reads_compact = not assignment.user_data.startswith(b"{")
        if isinstance(got, MapReference):
            published = self.published
            if published is None or published[0] != got.digest:
                self.on_reference(got)
                return
            got = published[1]  # the leader's own map: nothing to fetch
        self.apply(got)

    def apply(self, cluster_map: ClusterMap) -> None:
        """Hand *cluster_map* to the member's callback; never raises."""
        try:
            self._on_map(cluster_map)
        except Exception:
            # Raising here would stop aiokafka's coordination task and with it the heartbeats.
            log.exception("on_assignment callback failed for generation %s", cluster_map.generation)
