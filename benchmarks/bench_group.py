"""Bytes one rebalance writes, and the leader's assignment time, by group size.

For each (members, partitions) the leader's assignor (`SparkiqAssignor.assign`, standby
replicas 1) runs over members that report what a group at rest holds (each its actives and
standbys with their lags: the largest subscriptions get) and Kubernetes-length URLs
(`http://sparkiq-serving-N.sparkiq-serving.production.svc.cluster.local:8100`), and this
prints what goes through Kafka (the members' subscriptions, which the leader receives in
JoinGroup and the broker keeps in the group's record in `__consumer_offsets`, and the
assignments of the leader's SyncGroup, kept there too) and what over HTTP (the encoded map,
once per member that fetches it), three ways:

  1. `plain`: protocol 1, as before: the whole map as plain JSON in every assignment
     (`ClusterMap.to_bytes`), plain subscriptions              -- the reference
  2. `inline`: the compact map (`sparkiq.core.mapcodec`) in every assignment, as small
     groups get it (within `INLINE_BUDGET_BYTES`)
  3. `by reference`: what a group past the budget gets: a reference per assignment, the
     map served over HTTP by the leader

Goal: what one rebalance writes through Kafka stays far below Kafka's default 1 MiB
(`message.max.bytes`) up to 100 members x 3,000 partitions, and grows with members +
partitions. The leader's `assign()` time (median of `--rounds`) is printed beside it.

    .venv/bin/python benchmarks/bench_group.py [--rounds 3]

Pure computation: no broker, no processes. The time for a group of 60 node processes to
hold one map is measured by `tests/e2e/test_group_size.py`.
"""

from __future__ import annotations

import argparse
import time
from statistics import median

from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from sparkiq.core.mapcodec import encode_map
from sparkiq.core.mapref import MapReference
from sparkiq.core.topology import ClusterMap, MemberInfo
from sparkiq.node.group import assignmentdata
from sparkiq.node.group.assignment import assign
from sparkiq.node.group.assignor import SparkiqAssignor

SIZES = ((20, 300), (60, 3_000), (100, 3_000), (100, 2_000))
TABLES = 10
KAFKA_MAX_MESSAGE = 1_048_588


def url(i: int) -> str:
    return f"http://sparkiq-serving-{i}.sparkiq-serving.production.svc.cluster.local:8100"


class _Cluster:
    def __init__(self, counts: dict[str, int]) -> None:
        self._counts = counts

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self._counts.get(topic, 0)))


class _Exchange:
    url = url(0)

    def publish(self, generation: int, digest: str, data: bytes) -> None:
        pass

    async def fetch(self, reference: MapReference) -> bytes | None:
        return None


def at_rest(members: int, counts: dict[str, int]) -> dict[str, MemberInfo]:
    fresh = {f"m{i}": MemberInfo(url=url(i)) for i in range(members)}
    first = assign(fresh, counts, standby_replicas=1, acceptable_lag=10_000)
    out = {}
    for i in range(members):
        u = url(i)
        actives, standbys = first.actives_of(u), first.standbys_of(u)
        lags = dict.fromkeys(actives | standbys, 123_456)
        out[f"m{i}"] = MemberInfo(u, actives, standbys, lags, instance="f" * 32, started_ms=1)
    return out


def leader_round(
    members: dict[str, MemberInfo], counts: dict[str, int], *, budget: int
) -> tuple[SparkiqAssignor, float]:
    """One rebalance led by a fresh assignor, over compact subscriptions (what members send
    a leader of protocol 2)."""
    assignor = SparkiqAssignor(
        member_info=lambda: MemberInfo(url=url(0)),
        on_map=lambda m: None,
        generation=lambda: 7,
        standby_replicas=1,
        acceptable_lag=10_000,
    )
    assignor.exchange = _Exchange()
    assignor.inline_budget = budget
    metadata = {
        m: ConsumerProtocolMemberMetadata(0, sorted(counts), info.to_bytes(compact=True))
        for m, info in members.items()
    }
    started = time.perf_counter()
    assignor.assign(_Cluster(counts), metadata)
    return assignor, time.perf_counter() - started


def kib(n: float) -> str:
    return f"{n / 1024:,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(
        "| members x partitions | plain (before): subscriptions + assignments, KiB | inline "
        "| by reference | largest assignment: plain / by reference | map, KiB (over HTTP: "
        "x members - 1) | route taken | assign() ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for members_n, partitions in SIZES:
        counts = {f"app.table{t}-changelog": partitions // TABLES for t in range(TABLES)}
        members = at_rest(members_n, counts)
        cluster_map: ClusterMap = assign(
            members, counts, standby_replicas=1, acceptable_lag=10_000, generation=7
        )
        plain_sub = sum(len(m.to_bytes()) for m in members.values())
        plain_map = len(cluster_map.to_bytes())
        plain = plain_sub + members_n * plain_map
        times = []
        for _ in range(args.rounds):
            leader, took = leader_round(members, counts, budget=1 << 40)
            times.append(took)
        inline = leader.last_rebalance
        by_ref = leader_round(members, counts, budget=0)[0].last_rebalance
        chosen = leader_round(members, counts, budget=assignmentdata.INLINE_BUDGET_BYTES)[0]
        assert inline is not None
        assert by_ref is not None
        assert chosen.last_rebalance is not None
        encoded = len(encode_map(cluster_map))
        route = "inline" if chosen.last_rebalance.inline else "by reference"
        over = " (past 1 MiB)" if plain > KAFKA_MAX_MESSAGE else ""
        print(
            f"| {members_n} x {partitions:,} "
            f"| {kib(plain_sub)} + {kib(members_n * plain_map)} = {kib(plain)}{over} "
            f"| {kib(inline.subscriptions)} + {kib(inline.assignments)} "
            f"| {kib(by_ref.subscriptions)} + {kib(by_ref.assignments)} "
            f"| {kib(plain_map)} KiB / {by_ref.largest_assignment} B "
            f"| {kib(encoded)} ({kib(encoded * (members_n - 1))}) "
            f"| {route} | {median(times) * 1000:.0f} |"
        )


if __name__ == "__main__":
    main()
