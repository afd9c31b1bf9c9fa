"""What one rebalance writes: the map inline in small groups, a reference past the budget,
the whole plain map while a member of protocol 1 is in the group; and the bytes of a
rebalance of 100 members and 3,000 partitions, which grow with members + partitions.

The leader's assignor runs here on its own (a fake cluster's partition counts, members'
subscriptions as aiokafka hands them over, a fake exchange): a pure unit test.
"""

from __future__ import annotations

import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from sparkiq.core.mapcodec import MapEncodingError, decode_map
from sparkiq.core.mapref import MapReference
from sparkiq.core.topology import ClusterMap, MemberInfo
from sparkiq.node.group import assignmentdata
from sparkiq.node.group.assignment import assign
from sparkiq.node.group.assignor import SparkiqAssignor

KAFKA_DEFAULT_MAX_MESSAGE = 1_048_588  # message.max.bytes, Apache Kafka's default


def k8s_url(i: int) -> str:
    return f"http://sparkiq-serving-{i}.sparkiq-serving.production.svc.cluster.local:8100"


class FakeCluster:
    def __init__(self, counts: dict[str, int]) -> None:
        self._counts = counts

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self._counts.get(topic, 0)))


class FakeExchange:
    url = "http://leader:8100"

    def __init__(self) -> None:
        self.published: dict[str, bytes] = {}

    def publish(self, generation: int, digest: str, data: bytes) -> None:
        self.published[digest] = data

    async def fetch(self, reference: MapReference) -> bytes | None:
        return self.published.get(reference.digest)


def topics_of(partitions: int, tables: int = 10) -> dict[str, int]:
    return {f"app.table{t}-changelog": partitions // tables for t in range(tables)}


def steady_members(nodes: int, counts: dict[str, int]) -> dict[str, MemberInfo]:
    """Every node reports what a first assignment gave it, caught up (lags of its replicas):
    the subscriptions of a group at rest, the largest they get with one standby."""
    fresh = {f"m{i}": MemberInfo(url=k8s_url(i)) for i in range(nodes)}
    first = assign(fresh, counts, standby_replicas=1, acceptable_lag=10_000)
    members = {}
    for i in range(nodes):
        url = k8s_url(i)
        actives, standbys = first.actives_of(url), first.standbys_of(url)
        lags = {tp: 12_345 for tp in actives | standbys}
        members[f"m{i}"] = MemberInfo(url, actives, standbys, lags, instance="x" * 32)
    return members


def rebalance(
    members: dict[str, MemberInfo],
    counts: dict[str, int],
    exchange: FakeExchange | None,
    budget: int = assignmentdata.INLINE_BUDGET_BYTES,
) -> tuple[SparkiqAssignor, dict[str, bytes]]:
    assignor = SparkiqAssignor(
        member_info=lambda: MemberInfo(url="unused"),
        on_map=lambda m: None,
        generation=lambda: 9,
        standby_replicas=1,
        acceptable_lag=10_000,
    )
    assignor.exchange = exchange
    assignor.inline_budget = budget
    # Compact subscriptions: what members send once their leader showed it reads them.
    metadata = {
        member_id: ConsumerProtocolMemberMetadata(0, sorted(counts), info.to_bytes(compact=True))
        for member_id, info in members.items()
    }
    out = assignor.assign(FakeCluster(counts), metadata)
    return assignor, {member_id: a.user_data for member_id, a in out.items()}


def test_a_small_group_gets_the_map_inline_as_before() -> None:
    counts = topics_of(300)
    members = steady_members(20, counts)
    assignor, out = rebalance(members, counts, FakeExchange())
    expected = assign(members, counts, standby_replicas=1, acceptable_lag=10_000, generation=9)
    for data in out.values():
        assert assignmentdata.read(data) == expected
    led = assignor.last_rebalance
    assert led is not None
    assert led.inline
    assert led.assignments == sum(len(d) for d in out.values()) < assignmentdata.INLINE_BUDGET_BYTES


def test_past_the_budget_every_member_gets_a_reference_to_the_published_map() -> None:
    counts = topics_of(3_000)
    members = steady_members(100, counts)
    exchange = FakeExchange()
    assignor, out = rebalance(members, counts, exchange)
    refs = {assignmentdata.read(d) for d in out.values()}
    assert len(refs) == 1
    ref = refs.pop()
    assert isinstance(ref, MapReference)
    assert (ref.generation, ref.url) == (9, exchange.url)
    data = exchange.published[ref.digest]
    assert ref.matches(data)
    expected = assign(members, counts, standby_replicas=1, acceptable_lag=10_000, generation=9)
    assert decode_map(data) == expected
    # The leader applies its own map without fetching it.
    assert assignor.published == (ref.digest, expected)


def test_without_an_exchange_the_map_stays_inline_whatever_its_size() -> None:
    counts = topics_of(3_000)
    _, out = rebalance(steady_members(100, counts), counts, None, budget=0)
    assert all(isinstance(assignmentdata.read(d), ClusterMap) for d in out.values())


def test_a_member_of_protocol_1_gets_the_plain_json_map_it_reads() -> None:
    counts = topics_of(60)
    members = steady_members(4, counts)
    old = members["m3"]
    members["m3"] = MemberInfo(old.url, old.actives, old.standbys, old.lags, protocol=1)
    _, out = rebalance(members, counts, FakeExchange(), budget=0)
    for data in out.values():
        assert data.startswith(b"{")
        assert ClusterMap.from_bytes(data).owners  # what a member of protocol 1 does


def test_a_member_of_protocol_1_is_recognised_by_its_subscription() -> None:
    # What such a member sent: its own "v" (1), read back as protocol 1.
    info = MemberInfo.from_bytes(b'{"v": 1, "url": "http://old:8100"}')
    assert info.protocol == 1
    assert MemberInfo.from_bytes(MemberInfo(url="http://new").to_bytes()).protocol == 2


def test_user_data_of_no_known_form_is_refused() -> None:
    with pytest.raises(MapEncodingError):
        assignmentdata.read(b"SQM\x02Xjunk")
    with pytest.raises(MapEncodingError):
        assignmentdata.read(b"SQM\x02R{not json")


def rebalance_bytes(nodes: int, partitions: int) -> tuple[int, int, int]:
    """(assignments, subscriptions, largest assignment) of one rebalance of *nodes* steady
    members over *partitions*, with an exchange."""
    counts = topics_of(partitions)
    assignor, _ = rebalance(steady_members(nodes, counts), counts, FakeExchange())
    led = assignor.last_rebalance
    assert led is not None
    return led.assignments, led.subscriptions, led.largest_assignment


def test_one_rebalance_of_100_members_and_3000_partitions_writes_far_below_1_mib() -> None:
    assignments, subscriptions, largest = rebalance_bytes(100, 3_000)
    print(f"100 x 3,000: assignments {assignments} B, subscriptions {subscriptions} B")
    assert assignments < 32 * 1024
    assert largest < 200
    assert assignments + subscriptions < KAFKA_DEFAULT_MAX_MESSAGE // 4


def test_the_bytes_of_a_rebalance_grow_with_members_plus_partitions() -> None:
    """Linear in each: doubling the members doubles the references (not the map), and
    doubling the partitions adds to the subscriptions (each member reports its replicas'
    lags) by about as much as they hold, not members x partitions."""
    a50, s50, _ = rebalance_bytes(50, 3_000)
    a100, s100, _ = rebalance_bytes(100, 3_000)
    assert 1.9 < a100 / a50 < 2.1  # one small reference per member
    # The subscriptions hold every replica's lag once (3,000 actives + 3,000 standbys)
    # however many members share them: about the same total for 50 or 100 members.
    assert 0.8 < s100 / s50 < 1.5
    _, s100_6k, _ = rebalance_bytes(100, 6_000)
    assert 1.6 < s100_6k / s100 < 2.4
    # A product (every member the whole map) would have grown 4x from 50 x 3,000.
    assert (a100 + s100_6k) / (a50 + s50) < 3.0


def test_the_inline_budget_decides_per_rebalance() -> None:
    assert assignmentdata.fits_inline(20, 1_000)
    assert not assignmentdata.fits_inline(100, 6_500)
    assert assignmentdata.fits_inline(100, 6_500, budget=1 << 20)
