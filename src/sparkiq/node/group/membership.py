"""Keeps a serving node in the Kafka consumer group and hands it the cluster map.

Each node runs one `GroupMember`: an aiokafka consumer subscribed to the changelog topics
with sparkiq's own assignor. Nothing is fetched or committed through the group; the group is
used only for membership, failure detection and leader election:

- a member's subscription user data is its `MemberInfo` (URL, what it holds, lags), taken
  fresh at every join;
- the leader runs `sparkiq.node.group.assignment.assign` over all members and gives every member an
  assignment with *no* partitions and the whole `ClusterMap` as user data;
- every member decodes the map and hands it to its ``on_assignment`` callback, on the loop.

The changelog partitions are then followed by the restorer, not by this consumer.
confluent-kafka cannot run an assignor written in Python; aiokafka can.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    InvalidSessionTimeoutError,
    TopicAuthorizationFailedError,
)
from aiokafka.errors import KafkaError as AIOKafkaError
from aiokafka.protocol.group import LeaveGroupRequest

from sparkiq.core.errors import AccessDeniedError, ConfigError, KafkaError
from sparkiq.core.topology import ClusterMap, MemberInfo
from sparkiq.kafka.rights import Need, Operation, Refusal, Resource, principal_of, refusal_message
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity
from sparkiq.node.group.assignment import assign

log = logging.getLogger(__name__)

ASSIGNOR_NAME = "sparkiq"

# How long a getmany() call in the keep-alive task waits; it fetches nothing, so this only
# bounds how quickly a coordination error is noticed and logged.
_POLL_TIMEOUT_MS = 1_000


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

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(
            self.version, sorted(topics), self._member_info().to_bytes()
        )

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
        user_data = cluster_map.to_bytes()
        return {
            member_id: ConsumerProtocolMemberAssignment(self.version, [], user_data)
            for member_id in member_metadata
        }

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        try:
            cluster_map = ClusterMap.from_bytes(assignment.user_data)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            log.error("cannot read the cluster map in this assignment (%s); keeping the old", exc)
            return
        try:
            self._on_map(cluster_map)
        except Exception:
            # Raising here would stop aiokafka's coordination task and with it the heartbeats.
            log.exception("on_assignment callback failed for generation %s", cluster_map.generation)


class GroupMember:
    """One node's membership in ``group_id``; `cluster_map` is the latest map received."""

    def __init__(
        self,
        *,
        bootstrap: str,
        group_id: str,
        member_info: Callable[[], MemberInfo],
        on_assignment: Callable[[ClusterMap], None],
        standby_replicas: int,
        acceptable_lag: int,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        kafka_config: Mapping[str, str] | None = None,
        unassigned_topics: Iterable[str] = (),
        global_topics: Callable[[], Iterable[str]] = tuple,
        security: KafkaSecurity = PLAINTEXT,
    ) -> None:
        """*security* is translated for aiokafka here, so settings it cannot use (GSSAPI,
        OAUTHBEARER, keystores) raise ConfigError when the node starts, not on first join."""
        if heartbeat_interval_ms * 2 > session_timeout_ms:
            raise ConfigError(
                f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be at most half of "
                f"session_timeout_ms ({session_timeout_ms}); a third is usual"
            )
        self._bootstrap = bootstrap
        self._group_id = group_id
        self._on_assignment = on_assignment
        self._session_timeout_ms = session_timeout_ms
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._kafka_config = dict(kafka_config or {})
        self._security = security
        self._security_kwargs = security.aiokafka_kwargs()
        self._assignor = SparkiqAssignor(
            member_info=member_info,
            on_map=self._received,
            generation=self._current_generation,
            standby_replicas=standby_replicas,
            acceptable_lag=acceptable_lag,
            unassigned_topics=unassigned_topics,
            global_topics=global_topics,
        )
        self._consumer: AIOKafkaConsumer | None = None
        self._poll_task: asyncio.Task[None] | None = None
        self._topics: frozenset[str] = frozenset()
        self._first_map = asyncio.Event()
        self.cluster_map = ClusterMap()

    @property
    def topics(self) -> frozenset[str]:
        return self._topics

    async def start(self, topics: Iterable[str]) -> None:
        """Join the group and return once the first cluster map has arrived.

        With no topics there is nothing to assign and the node stays out of the group until
        `set_topics` gives it some.
        """
        self._topics = frozenset(topics)
        if self._topics:
            await self._join()

    async def set_topics(self, topics: Iterable[str]) -> None:
        """Follow a new set of changelog topics: every member gets a new map."""
        new = frozenset(topics)
        if new == self._topics:
            return
        self._topics = new
        if not new:
            await self._leave()
            self.cluster_map = ClusterMap()
            return
        if self._consumer is None:
            await self._join()
            return
        # A new subscription makes aiokafka rejoin, which makes the leader reassign.
        self._consumer.subscribe(sorted(new))

    def request_rebalance(self) -> None:
        """Rejoin so the leader reassigns with this member's fresh lags (a warm-up finished).

        aiokafka has no public "rejoin" call. Subscribing again to the same topics is public
        API and is enough: it replaces the subscription object, the coordinator sees the old
        one inactive and rejoins, sending a fresh `MemberInfo`; the coordinator then starts a
        rebalance and every member rejoins. (`_coordinator.request_rejoin()` would do the same
        through a private attribute.)
        """
        if self._consumer is not None and self._topics:
            self._consumer.subscribe(sorted(self._topics))

    async def stop(self) -> None:
        """Leave the group at once (LeaveGroup), so the others rebalance without waiting."""
        await self._leave()

    async def _join(self) -> None:
        config: dict[str, Any] = {
            "bootstrap_servers": self._bootstrap,
            "group_id": self._group_id,
            "client_id": f"sparkiq-{uuid.uuid4().hex[:8]}",
            "enable_auto_commit": False,
            "partition_assignment_strategy": (self._assignor,),
            "session_timeout_ms": self._session_timeout_ms,
            "heartbeat_interval_ms": self._heartbeat_interval_ms,
            # The broker waits this long for every member to rejoin in a rebalance: it bounds
            # how long survivors wait for a member that died mid-rebalance. aiokafka rejoins
            # in the background, so a session timeout is plenty.
            "rebalance_timeout_ms": self._session_timeout_ms,
            # aiokafka leaves the group when getmany() is not called for this long; the
            # keep-alive task calls it continuously, this is only a backstop.
            "max_poll_interval_ms": max(60_000, 10 * self._session_timeout_ms),
            # New partitions of a followed topic reach the leader's metadata this often.
            "metadata_max_age_ms": 30_000,
        }
        config.update(self._security_kwargs)
        config.update(self._kafka_config)
        consumer = AIOKafkaConsumer(**config)
        consumer.subscribe(sorted(self._topics))
        self._first_map.clear()
        # Set before start(): the first assignment may run during start() on the leader.
        self._consumer = consumer
        said = _LoggedErrors()
        try:
            with said.listening():
                await consumer.start()
            timeout_s = max(30.0, 3 * self._session_timeout_ms / 1000)
            await asyncio.wait_for(self._first_map.wait(), timeout_s)
        except Exception as exc:
            self._consumer = None
            with contextlib.suppress(Exception):
                await consumer.stop()
            reason = repr(exc)
            mechanism = self._security.mechanism or ""
            # A login the broker refuses: Apache Kafka answers with an authentication error,
            # which aiokafka only logs before it gives up bootstrapping; the dev broker with
            # a SCRAM error reply (``e=...`` instead of ``v=...``), which aiokafka lets out as
            # KeyError('v').
            if said.sasl_refusal is not None:
                reason = f"the broker refused the {mechanism} login: {said.sasl_refusal}"
            elif isinstance(exc, KeyError) and mechanism.startswith("SCRAM"):
                reason = f"the broker refused the {mechanism} login"
            elif isinstance(exc, GroupAuthorizationFailedError | TopicAuthorizationFailedError):
                raise AccessDeniedError(self._refusal(exc)) from exc
            elif isinstance(exc, InvalidSessionTimeoutError):
                raise KafkaError(
                    f"the brokers of {self._bootstrap} refuse a session timeout of "
                    f"{self._session_timeout_ms} ms: it must lie within their "
                    "group.min.session.timeout.ms and group.max.session.timeout.ms (6 s to "
                    "30 min by default); pass --session-timeout-ms within them"
                ) from exc
            raise KafkaError(
                f"cannot join consumer group {self._group_id!r} on {self._bootstrap} "
                f"({reason}, connecting with {self._security.summary}); check that the "
                f"broker is reachable, the Kafka security settings are the cluster's and "
                f"the topics {sorted(self._topics)} exist"
            ) from exc
        self._poll_task = asyncio.create_task(self._keep_polling(consumer))

    def _refusal(self, exc: GroupAuthorizationFailedError | TopicAuthorizationFailedError) -> str:
        """The message for a join the brokers refused: the group or the topics it names."""
        principal = principal_of(self._security)
        if isinstance(exc, GroupAuthorizationFailedError):
            needs = [Need(Resource.GROUP, self._group_id, Operation.READ, "join it")]
        else:
            named = sorted({str(t) for arg in exc.args for t in _names(arg)} & self._topics)
            needs = [
                Need(Resource.TOPIC, t, Operation.READ, "follow it in the group")
                for t in named or sorted(self._topics)
            ]
        refusals = [Refusal(n, principal) for n in needs]
        return refusal_message(refusals, self._bootstrap, f"join group {self._group_id!r}")

    async def _leave(self) -> None:
        task, self._poll_task = self._poll_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await _leave_group_at_generation_zero(consumer, self._group_id)
            # stop() sends LeaveGroup (generation > 0), so the others rebalance right away.
            await consumer.stop()

    async def _keep_polling(self, consumer: AIOKafkaConsumer) -> None:
        """Call getmany() forever: it fetches nothing but keeps the member alive.

        aiokafka counts the time spent outside getmany() as "idle" and leaves the group (and
        refuses to rejoin) once it passes max_poll_interval_ms, even while heartbeats go on.
        getmany() also surfaces coordination errors, which would otherwise stay silent.
        """
        while True:
            try:
                await consumer.getmany(timeout_ms=_POLL_TIMEOUT_MS)
            except asyncio.CancelledError:
                raise
            except AIOKafkaError as exc:
                log.warning("consumer group %s: %r; retrying", self._group_id, exc)
                await asyncio.sleep(_POLL_TIMEOUT_MS / 1000)

    def _current_generation(self) -> int:
        # aiokafka has no public accessor; the coordinator holds the generation the
        # coordinator just opened when the leader's assignor runs.
        coordinator = getattr(self._consumer, "_coordinator", None)
        return int(getattr(coordinator, "generation", -1))

    def _received(self, cluster_map: ClusterMap) -> None:
        self.cluster_map = cluster_map
        self._first_map.set()
        self._on_assignment(cluster_map)


def _names(arg: object) -> list[object]:
    """The topic names an aiokafka error carries: one name, or a collection of them."""
    if isinstance(arg, str):
        return [arg]
    if isinstance(arg, Iterable):
        return list(arg)
    return [arg]


class _LoggedErrors(logging.Handler):
    """The errors aiokafka logs, not raises, while a consumer starts (a refused login)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.sasl_refusal: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "SaslAuthenticationFailed" in text or "Authentication failed" in text:
            self.sasl_refusal = text.rsplit("]", 1)[-1].strip() or text

    @contextlib.contextmanager
    def listening(self) -> Iterator[None]:
        logger = logging.getLogger("aiokafka")
        logger.addHandler(self)
        try:
            yield
        finally:
            logger.removeHandler(self)


async def _leave_group_at_generation_zero(consumer: AIOKafkaConsumer, group_id: str) -> None:
    """Send LeaveGroup for a member of generation 0, which aiokafka's stop() skips.

    aiokafka sends LeaveGroup only when ``generation > 0``: Kafka numbers generations from 1,
    but the dev broker (Tansu) numbers them from 0, so every member of a group's first
    generation would leave silently and the others would wait a whole session timeout to
    see it gone. LeaveGroup v0/v1 carries no generation, so sending it ourselves is exactly
    what stop() does for later generations. There is no public hook for this; it uses the
    coordinator's request helper.
    """
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or getattr(coordinator, "generation", -1) != 0:
        return
    member_id = getattr(coordinator, "member_id", "")
    if not member_id:
        return
    try:
        await coordinator._send_req(LeaveGroupRequest(group_id, member_id))
    except AIOKafkaError as exc:
        log.warning("LeaveGroup for %s failed (%r); the group will expire it", group_id, exc)
