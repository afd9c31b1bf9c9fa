"""GroupMember on Apache Kafka: identical maps, fast leave, topic changes, killed members,
and a session timeout the brokers refuse.

Timings on Apache Kafka 4.4 (classic group protocol): a new group's first rebalance waits
`group.initial.rebalance.delay.ms` (3 s) for more members; a clean leave rebalances at once
(survivors had a new map 0.5 s after stop()), a killed member once its session timeout S
has passed (4.0 s with S = 4 s). The tests use S = 4 s to stay fast and print what they
measure.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path

import httpx
import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from sparkiq.auth import AuthConfig
from sparkiq.core.errors import KafkaError
from sparkiq.core.mapcodec import encode_map
from sparkiq.core.mapref import MapReference, digest_of
from sparkiq.core.topology import ClusterMap, MemberInfo, PartitionOwners
from sparkiq.dev.kafkabroker import KafkaBroker
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpServer
from sparkiq.http.staticview import StaticView
from sparkiq.kafka.admin import create_topic
from sparkiq.node.group import assignmentdata
from sparkiq.node.group.membership import GroupMember
from tests.support.auth import CLUSTER_SECRET, SECRET, write

SESSION_MS = 4_000
HEARTBEAT_MS = 500
# Measured 0.5 s for a clean leave with these settings on Apache Kafka (2.5-3.5 s on the dev
# broker, which holds every JoinGroup about S/2); the margin is for a loaded 2-core machine.
CLEAN_LEAVE_BOUND_S = 5.0
KILLED_BOUND_S = SESSION_MS / 1000 + 5.0


def url(i: int) -> str:
    return f"http://127.0.0.1:{18100 + i}"


class Recorder:
    """on_assignment callback that keeps every map with the time it arrived."""

    def __init__(self) -> None:
        self.maps: list[tuple[float, ClusterMap]] = []

    def __call__(self, cluster_map: ClusterMap) -> None:
        self.maps.append((time.monotonic(), cluster_map))


def make_member(
    bootstrap: str,
    group: str,
    node_url: str,
    *,
    info: Callable[[], MemberInfo] | None = None,
    recorder: Recorder | None = None,
) -> GroupMember:
    return GroupMember(
        bootstrap=bootstrap,
        group_id=group,
        member_info=info or (lambda: MemberInfo(url=node_url)),
        on_assignment=recorder or Recorder(),
        standby_replicas=1,
        acceptable_lag=100,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
    )


async def wait_until(
    members: Iterable[GroupMember], pred: Callable[[ClusterMap], bool], timeout_s: float
) -> float:
    """Seconds until *pred* holds for every member's map; fails the test after timeout_s."""
    members = list(members)
    start = time.monotonic()
    while not all(pred(m.cluster_map) for m in members):
        if time.monotonic() - start > timeout_s:
            maps = [m.cluster_map for m in members]
            pytest.fail(f"condition not met within {timeout_s}s; maps: {maps}")
        await asyncio.sleep(0.02)
    return time.monotonic() - start


@contextlib.asynccontextmanager
async def started(members: list[GroupMember], topics: list[str]) -> AsyncIterator[None]:
    try:
        await asyncio.gather(*(m.start(topics) for m in members))
        yield
    finally:
        await asyncio.gather(*(m.stop() for m in members), return_exceptions=True)


def covers(cluster_map: ClusterMap, topic: str, partitions: int) -> bool:
    return all(
        (o := cluster_map.owner_of((topic, p))) is not None and o.active is not None
        for p in range(partitions)
    )


async def test_three_members_receive_identical_maps(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("members")
    create_topic(bootstrap, topic, 6)
    group = unique_name("group")
    members = [make_member(bootstrap, group, url(i)) for i in range(3)]

    async with started(members, [topic]):
        await wait_until(members, lambda cm: len(cm.urls()) == 3, timeout_s=20)
        first = members[0].cluster_map
        for m in members[1:]:
            assert m.cluster_map.owners == first.owners
            assert m.cluster_map.generation == first.generation
        assert covers(first, topic, 6)
        for p in range(6):
            owners = first.owners[(topic, p)]
            assert len(owners.standbys) == 1
            assert owners.active not in owners.standbys
        assert sorted(len(first.actives_of(url(i))) for i in range(3)) == [2, 2, 2]


async def test_past_the_budget_every_member_fetches_the_same_map_from_the_leader(
    bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """Three members, each with its node's HTTP server as its map exchange (authentication
    on, so fetches are signed with the cluster secret), the inline budget forced to 0: every
    assignment carries a reference, the leader serves the map, the others fetch it."""
    topic = unique_name("byref")
    create_topic(bootstrap, topic, 12)
    group = unique_name("group")
    auth = AuthConfig.load(
        auth="required",
        jwt_secret_file=write(tmp_path / "jwt.secret", SECRET),
        cluster_secret_file=write(tmp_path / "cluster.secret", CLUSTER_SECRET),
    )
    servers = [
        HttpServer(StaticView(f"http://127.0.0.1:{port}", []), "127.0.0.1", port, auth=auth)
        for port in (free_port() for _ in range(3))
    ]
    members = [make_member(bootstrap, group, server.url) for server in servers]
    for member, server in zip(members, servers, strict=True):
        member.use_exchange(server.api.maps, inline_budget=0)
    async with contextlib.AsyncExitStack() as stack:
        for server in servers:
            await stack.enter_async_context(server)  # serving before the members join
        async with started(members, [topic]):
            await wait_until(members, lambda cm: len(cm.urls()) == 3, timeout_s=30)
            first = members[0].cluster_map
            assert all(m.cluster_map == first for m in members[1:])
            assert covers(first, topic, 12)
            led = [m.last_rebalance for m in members if m.last_rebalance is not None]
            last = max(led, key=lambda r: r.generation)
            assert last.generation == first.generation
            assert not last.inline
            assert last.largest_assignment < 200
            # The leader served its map to the two others (and maybe earlier generations').
            leader = next(
                s for s, m in zip(servers, members, strict=True) if m.last_rebalance is last
            )
            assert leader.api.maps.served >= 2
            # Not to anyone else: a request without the cluster's signature is refused.
            async with httpx.AsyncClient() as http:
                digest = leader.api.maps.digests()[-1]
                got = await http.get(f"{leader.url}/v1/cluster-map/{digest}")
            assert got.status_code == 403


async def test_clean_stop_gives_the_others_a_map_without_it_quickly(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("leave")
    create_topic(bootstrap, topic, 4)
    group = unique_name("group")
    members = [make_member(bootstrap, group, url(i)) for i in range(3)]

    async with started(members, [topic]):
        await wait_until(members, lambda cm: len(cm.urls()) == 3, timeout_s=20)
        leaver, survivors = members[2], members[:2]
        stopped = time.monotonic()
        await leaver.stop()
        elapsed = await wait_until(
            survivors, lambda cm: url(2) not in cm.urls(), timeout_s=CLEAN_LEAVE_BOUND_S + 5
        )
        print(f"clean leave: survivors had a new map {elapsed:.2f}s after stop()")
        assert time.monotonic() - stopped < CLEAN_LEAVE_BOUND_S
        assert all(covers(m.cluster_map, topic, 4) for m in survivors)
        assert survivors[0].cluster_map.owners == survivors[1].cluster_map.owners


async def test_set_topics_adds_the_new_topic_to_the_map(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    first, second = unique_name("topic-a"), unique_name("topic-b")
    create_topic(bootstrap, first, 2)
    create_topic(bootstrap, second, 3)
    group = unique_name("group")
    members = [make_member(bootstrap, group, url(i)) for i in range(2)]

    async with started(members, [first]):
        await wait_until(members, lambda cm: len(cm.urls()) == 2, timeout_s=20)
        assert not covers(members[0].cluster_map, second, 3)
        # One member learns of the new table first; the rebalance it starts carries the
        # topic to everyone, and the other follows when it learns of it too.
        await members[0].set_topics([first, second])
        await wait_until(members, lambda cm: covers(cm, second, 3), timeout_s=20)
        await members[1].set_topics([first, second])
        await wait_until(
            members, lambda cm: covers(cm, first, 2) and covers(cm, second, 3), timeout_s=20
        )
        assert members[0].cluster_map.owners == members[1].cluster_map.owners


async def test_request_rebalance_carries_fresh_lags_into_the_map(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("warm")
    create_topic(bootstrap, topic, 2)
    group = unique_name("group")
    lags: dict[tuple[str, int], int] = {}
    warming = make_member(
        bootstrap, group, url(1), info=lambda: MemberInfo(url=url(1), lags=dict(lags))
    )
    members = [make_member(bootstrap, group, url(0)), warming]

    async with started(members, [topic]):
        await wait_until(members, lambda cm: len(cm.urls()) == 2, timeout_s=20)
        lags[(topic, 0)] = 7
        warming.request_rebalance()
        await wait_until(
            members, lambda cm: cm.nodes.get(url(1), {}).get((topic, 0)) == 7, timeout_s=20
        )


CHILD = """
import asyncio, sys
from sparkiq.node.group.membership import GroupMember
from sparkiq.core.topology import MemberInfo

async def main(bootstrap, group, topic, url, session_ms, heartbeat_ms):
    member = GroupMember(
        bootstrap=bootstrap, group_id=group, member_info=lambda: MemberInfo(url=url),
        on_assignment=lambda cm: None, standby_replicas=1, acceptable_lag=100,
        session_timeout_ms=int(session_ms), heartbeat_interval_ms=int(heartbeat_ms),
    )
    await member.start([topic])
    print("joined", flush=True)
    await asyncio.Event().wait()

asyncio.run(main(*sys.argv[1:]))
"""


async def test_killed_member_is_dropped_after_the_session_timeout(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("kill")
    create_topic(bootstrap, topic, 4)
    group = unique_name("group")
    members = [make_member(bootstrap, group, url(i)) for i in range(2)]
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD,
        *(bootstrap, group, topic, url(9), str(SESSION_MS), str(HEARTBEAT_MS)),
        stdout=asyncio.subprocess.DEVNULL,
        stdin=asyncio.subprocess.DEVNULL,
    )
    try:
        async with started(members, [topic]):
            await wait_until(members, lambda cm: url(9) in cm.urls(), timeout_s=30)
            await wait_until(members, lambda cm: len(cm.urls()) == 3, timeout_s=20)
            os.kill(child.pid, signal.SIGKILL)
            await asyncio.wait_for(child.wait(), 10)
            killed = time.monotonic()
            elapsed = await wait_until(
                members, lambda cm: url(9) not in cm.urls(), timeout_s=KILLED_BOUND_S + 10
            )
            print(f"SIGKILL: survivors had a new map {elapsed:.2f}s after the kill")
            assert time.monotonic() - killed < KILLED_BOUND_S
            assert all(covers(m.cluster_map, topic, 4) for m in members)
    finally:
        if child.returncode is None:
            os.kill(child.pid, signal.SIGKILL)
            await asyncio.wait_for(child.wait(), 10)


class _Cluster:
    """What the assignor asks of aiokafka's cluster metadata: partition ids per topic."""

    def __init__(self, counts: dict[str, int]) -> None:
        self._counts = counts

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self._counts.get(topic, 0)))


def test_unassigned_topics_take_no_share_of_the_actives() -> None:
    from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

    from sparkiq.node.group.assignor import SparkiqAssignor

    maps: list[ClusterMap] = []
    assignor = SparkiqAssignor(
        member_info=lambda: MemberInfo(url=url(0)),
        on_map=maps.append,
        generation=lambda: 1,
        standby_replicas=1,
        acceptable_lag=10,
        unassigned_topics=("app.catalog",),
    )
    topics = ["app.catalog", "table-a"]
    members = {
        f"member-{i}": ConsumerProtocolMemberMetadata(0, topics, MemberInfo(url=url(i)).to_bytes())
        for i in range(3)
    }
    out = assignor.assign(_Cluster({"app.catalog": 1, "table-a": 6}), members)
    cluster_map = assignmentdata.read(out["member-0"].user_data)
    assert isinstance(cluster_map, ClusterMap)
    assert {tp[0] for tp in cluster_map.owners} == {"table-a"}
    # 6 partitions over 3 nodes: 2 actives each (with the catalog's partition counted, one
    # node would get 3 table partitions and another 1 and the catalog's).
    assert sorted(len(cluster_map.actives_of(url(i))) for i in range(3)) == [2, 2, 2]


async def test_a_session_timeout_the_brokers_refuse_is_said_plainly() -> None:
    # Apache Kafka's own floor (group.min.session.timeout.ms, 6 s by default) against 3 s.
    with KafkaBroker(settings={"group.min.session.timeout.ms": "6000"}) as strict:
        create_topic(strict.bootstrap_servers, "t", 1)
        member = GroupMember(
            bootstrap=strict.bootstrap_servers,
            group_id="strict.serving",
            member_info=lambda: MemberInfo(url=url(0)),
            on_assignment=Recorder(),
            standby_replicas=0,
            acceptable_lag=0,
            session_timeout_ms=3_000,
            heartbeat_interval_ms=1_000,
        )
        started_at = time.monotonic()
        with pytest.raises(KafkaError, match=r"refuse a session timeout of 3000 ms.*--session"):
            await member.start(["t"])
        assert time.monotonic() - started_at < 10


class FlakyExchange:
    """An exchange whose leader answers nothing, then the wrong bytes, then the map."""

    url = "http://leader:8100"

    def __init__(self, answers: list[bytes | None]) -> None:
        self.answers = answers
        self.asked = 0

    def publish(self, generation: int, digest: str, data: bytes) -> None:
        raise AssertionError("a member that is not the leader publishes nothing")

    async def fetch(self, reference: MapReference) -> bytes | None:
        self.asked += 1
        return self.answers.pop(0) if self.answers else None


def assignment_of(data: bytes) -> ConsumerProtocolMemberAssignment:
    return ConsumerProtocolMemberAssignment(0, [], data)


async def test_a_member_asks_again_until_the_referenced_map_arrives_whole() -> None:
    recorder = Recorder()
    member = make_member("127.0.0.1:1", "g", url(1), recorder=recorder)
    cluster_map = ClusterMap(5, {("t", 0): PartitionOwners(url(0), (url(1),))})
    encoded = encode_map(cluster_map)
    ref = MapReference(5, digest_of(encoded), len(encoded), FlakyExchange.url)
    exchange = FlakyExchange([None, b"not the map", encoded])
    member.use_exchange(exchange)
    member._assignor.on_assignment(assignment_of(assignmentdata.by_reference(ref)))
    await wait_until([member], lambda cm: cm.generation == 5, timeout_s=5)
    assert member.cluster_map == cluster_map
    assert exchange.asked == 3
    assert [m for _, m in recorder.maps] == [cluster_map]


async def test_a_newer_assignment_ends_the_fetch_of_an_older_map() -> None:
    recorder = Recorder()
    member = make_member("127.0.0.1:1", "g", url(1), recorder=recorder)
    exchange = FlakyExchange([])  # the leader of generation 5 never answers
    member.use_exchange(exchange)
    ref = MapReference(5, "0" * 64, 10, FlakyExchange.url)
    member._assignor.on_assignment(assignment_of(assignmentdata.by_reference(ref)))
    await asyncio.sleep(0.1)
    newer = ClusterMap(6, {("t", 0): PartitionOwners(url(1))})
    member._assignor.on_assignment(assignment_of(assignmentdata.inline(encode_map(newer))))
    asked = exchange.asked
    await asyncio.sleep(0.3)
    assert exchange.asked == asked  # no longer asking
    assert member.cluster_map == newer
    assert [m for _, m in recorder.maps] == [newer]


def test_a_rebalance_asked_for_while_one_is_under_way_is_dropped() -> None:
    """Asking again while this member rejoins would make a second rebalance right after the
    first, for every member; the listener marks the rejoin until the next assignment."""

    class Consumer:
        def __init__(self) -> None:
            self.subscribed = 0

        def subscribe(self, topics: list[str], listener: object = None) -> None:
            self.subscribed += 1

    member = make_member("127.0.0.1:1", "g", url(1))
    consumer = Consumer()
    member._consumer = consumer  # type: ignore[assignment]
    member._topics = frozenset({"t"})
    member.request_rebalance()
    assert consumer.subscribed == 1
    member._listener.on_partitions_revoked(set())  # aiokafka: about to rejoin
    member.request_rebalance()
    assert consumer.subscribed == 1
    member._listener.on_partitions_assigned(set())  # the rebalance is over
    member.request_rebalance()
    assert consumer.subscribed == 2
