"""Keeps a serving node in the Kafka consumer group and hands it the cluster map.

Each node runs one `GroupMember`: an aiokafka consumer subscribed to the changelog topics
with sparkiq's own assignor. Nothing is fetched or committed through the group; the group is
used only for membership, failure detection and leader election:

- a member's subscription user data is its `MemberInfo` (URL, what it holds, lags), taken
  fresh at every join;
- the leader runs `sparkiq.node.group.assignment.assign` over all members and gives every member an
  assignment with *no* partitions and, as user data, the map in its compact encoding
  (`sparkiq.core.mapcodec`) while members x map bytes stay within a budget, else a
  `MapReference` (generation, digest, size, the leader's URL: `assignmentdata`); the
  leader then serves the encoded map over HTTP through its `MapExchange`;
- every member decodes the map (or fetches it by reference, checks its digest, and retries
  with a backoff until it has it or a newer assignment arrives) and hands it to its
  ``on_assignment`` callback, on the loop. The leader applies its own map directly.

So the bytes one rebalance writes through Kafka grow with members + partitions (each
member's subscription, a small reference each), not with their product. A member without
an exchange (tests' light members) always gets the map inline; so does every member while
one of protocol 1 is in the group (a rolling upgrade), in the form that one reads.

The changelog partitions are then followed by the restorer, not by this consumer.
confluent-kafka cannot run an assignor written in Python; aiokafka can.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    InvalidSessionTimeoutError,
    TopicAuthorizationFailedError,
)
from aiokafka.errors import KafkaError as AIOKafkaError
from aiokafka.protocol.group import LeaveGroupRequest

from sparkiq.core.errors import AccessDeniedError, ConfigError, KafkaError
from sparkiq.core.mapcodec import MapEncodingError, decode_map
from sparkiq.core.mapref import MapExchange, MapReference
from sparkiq.core.topology import ClusterMap, MemberInfo
from sparkiq.kafka.rights import Need, Operation, Resource, denied
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity
from sparkiq.node.group.assignor import RebalanceBytes, SparkiqAssignor

log = logging.getLogger(__name__)

# How long a getmany() call in the keep-alive task waits; it fetches nothing, so this only
# bounds how quickly a coordination error is noticed and logged.
_POLL_TIMEOUT_MS = 1_000
# A map fetched by reference is asked for again after this, doubling up to the cap.
_FETCH_FIRST_RETRY_S = 0.05
_FETCH_MAX_RETRY_S = 2.0


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
        exchange: MapExchange | None = None,
    ) -> None:
        """*security* is translated for aiokafka here, so settings it cannot use (GSSAPI,
        OAUTHBEARER, keystores) raise ConfigError when the node starts, not on first join.

        *exchange*: where maps past the inline budget are served and fetched (see
        `use_exchange`); without one, every assignment carries the whole map."""
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
        self._assignor.on_reference = self._fetch_later
        self._assignor.exchange = exchange
        self._consumer: AIOKafkaConsumer | None = None
        self._poll_task: asyncio.Task[None] | None = None
        self._fetch_task: asyncio.Task[None] | None = None
        self._topics: frozenset[str] = frozenset()
        self._first_map = asyncio.Event()
        self.map_received_at: float | None = None  # Unix time `cluster_map` arrived
        # True from the moment this member prepares to rejoin until its next assignment.
        self.rebalancing = False
        self._listener = _RebalanceWatch(self)
        self.cluster_map = ClusterMap()

    def use_exchange(self, exchange: MapExchange | None, inline_budget: int | None = None) -> None:
        """Serve and fetch maps past *inline_budget* (members x encoded map bytes; default
        `assignmentdata.INLINE_BUDGET_BYTES`) through *exchange*. Call before `start`; the
        exchange must serve before this member joins (the node starts its HTTP server first).
        """
        self._assignor.exchange = exchange
        if inline_budget is not None:
            self._assignor.inline_budget = inline_budget

    @property
    def last_rebalance(self) -> RebalanceBytes | None:
        """What the last rebalance this member led wrote through Kafka (None: led none)."""
        return self._assignor.last_rebalance

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
        self._consumer.subscribe(sorted(new), listener=self._listener)

    def request_rebalance(self) -> None:
        """Rejoin so the leader reassigns with this member's fresh lags (a warm-up finished).

        aiokafka has no public "rejoin" call. Subscribing again to the same topics is public
        API and is enough: it replaces the subscription object, the coordinator sees the old
        one inactive and rejoins, sending a fresh `MemberInfo`; the coordinator then starts a
        rebalance and every member rejoins. (`_coordinator.request_rejoin()` would do the same
        through a private attribute.)

        Dropped while a rebalance is under way (this member is rejoining): asking again
        would make a second one right after it, for every member. The asker sees the new map
        and asks again if it still needs to.
        """
        if self.rebalancing:
            log.info("group %s: a rebalance is under way; not asking for another", self._group_id)
            return
        if self._consumer is not None and self._topics:
            self._consumer.subscribe(sorted(self._topics), listener=self._listener)

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
        consumer.subscribe(sorted(self._topics), listener=self._listener)
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
                raise self._refusal(exc) from exc
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

    def _refusal(
        self, exc: GroupAuthorizationFailedError | TopicAuthorizationFailedError
    ) -> AccessDeniedError:
        """The error for a join the brokers refused: the group or the topics it names."""
        if isinstance(exc, GroupAuthorizationFailedError):
            needs = [Need(Resource.GROUP, self._group_id, Operation.READ, "join it")]
        else:
            named = sorted({str(t) for arg in exc.args for t in _names(arg)} & self._topics)
            needs = [
                Need(Resource.TOPIC, t, Operation.READ, "follow it in the group")
                for t in named or sorted(self._topics)
            ]
        return denied(needs, self._security, self._bootstrap, f"join group {self._group_id!r}")

    async def _leave(self) -> None:
        self._cancel_fetch()
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

    def _fetch_later(self, reference: MapReference) -> None:
        """Fetch the map *reference* names in a task; a newer assignment cancels it."""
        self._cancel_fetch()
        self._fetch_task = asyncio.get_running_loop().create_task(self._fetch(reference))

    def _cancel_fetch(self) -> None:
        task, self._fetch_task = self._fetch_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _fetch(self, reference: MapReference) -> None:
        """Ask the leader for the map until it arrives whole (digest checked), with a
        doubling backoff; cancelled when a newer assignment arrives or the member leaves."""
        exchange = self._assignor.exchange
        if exchange is None:
            log.error(
                "group %s: generation %d's map is by reference, but this member has no map "
                "exchange to fetch it; keeping the old",
                self._group_id,
                reference.generation,
            )
            return
        started = time.monotonic()
        delay = _FETCH_FIRST_RETRY_S
        attempts = 0
        while True:
            attempts += 1
            try:
                data = await exchange.fetch(reference)
            except Exception:
                # The exchange reports what it cannot reach as None; anything else is a bug
                # to log, not a reason to stop asking (the member would keep its old map).
                log.exception("fetching generation %d's map failed", reference.generation)
                data = None
            if data is not None and reference.matches(data):
                try:
                    cluster_map = decode_map(data)
                except MapEncodingError as exc:
                    log.error(
                        "the map of generation %d does not decode: %s", reference.generation, exc
                    )
                else:
                    if attempts > 1:
                        log.info(
                            "group %s: map of generation %d fetched from %s after %d attempts "
                            "(%.1f s)",
                            self._group_id,
                            reference.generation,
                            reference.url,
                            attempts,
                            time.monotonic() - started,
                        )
                    self._assignor.apply(cluster_map)
                    return
            elif data is not None:
                log.warning(
                    "the map fetched from %s for generation %d is not the one referenced "
                    "(%d bytes, digest differs); asking again",
                    reference.url,
                    reference.generation,
                    len(data),
                )
            # Jitter: the members of a big group do not ask again all at once.
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, _FETCH_MAX_RETRY_S)

    def _received(self, cluster_map: ClusterMap) -> None:
        self._cancel_fetch()
        self.cluster_map = cluster_map
        self.map_received_at = time.time()
        self._first_map.set()
        self._on_assignment(cluster_map)


def _names(arg: object) -> list[object]:
    """The topic names an aiokafka error carries: one name, or a collection of them."""
    if isinstance(arg, str):
        return [arg]
    if isinstance(arg, Iterable):
        return list(arg)
    return [arg]


class _RebalanceWatch(ConsumerRebalanceListener):  # type: ignore[misc]
    """Tells its member when it prepares to rejoin (aiokafka's public listener, called
    before every JoinGroup): a rebalance is under way until the member's next map."""

    def __init__(self, member: GroupMember) -> None:
        self._member = member

    def on_partitions_revoked(self, revoked: object) -> None:
        self._member.rebalancing = True

    def on_partitions_assigned(self, assigned: object) -> None:
        # After the assignment was handed over (`SparkiqAssignor.on_assignment`), whatever
        # it held: the rebalance is over.
        self._member.rebalancing = False


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
