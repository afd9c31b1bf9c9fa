"""Properties of `sparkiq.node.group.assignment.assign`, checked with hypothesis, and a few
scenarios."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkiq.core.errors import ConfigError
from sparkiq.core.topology import ClusterMap, MemberInfo, TopicPartition
from sparkiq.node.group.assignment import assign

TOPICS = ("orders", "users", "totals")


def url(i: int) -> str:
    return f"http://127.0.0.1:{8100 + i}"


def all_tps(partitions: Mapping[str, int]) -> list[TopicPartition]:
    return sorted((t, p) for t, n in partitions.items() for p in range(n))


def reports(cluster_map: ClusterMap, urls: list[str], lag: int = 0) -> dict[str, MemberInfo]:
    """What every node reports at the next rebalance once it has restored what it holds."""
    out = {}
    for u in urls:
        following = cluster_map.standbys_of(u) | cluster_map.warming_of(u)
        held = cluster_map.actives_of(u) | following
        out[f"member-{u}"] = MemberInfo(
            url=u,
            actives=cluster_map.actives_of(u),
            standbys=following,
            lags=dict.fromkeys(held, lag),
        )
    return out


def steady(urls: list[str], partitions: Mapping[str, int], standby_replicas: int) -> ClusterMap:
    """The map a group of fresh nodes settles on once every warm-up has finished."""
    cm = assign(
        {f"member-{u}": MemberInfo(url=u) for u in urls},
        partitions,
        standby_replicas=standby_replicas,
        acceptable_lag=10,
    )
    for _ in range(4):
        cm = assign(
            reports(cm, urls), partitions, standby_replicas=standby_replicas, acceptable_lag=10
        )
    assert not any(o.warming for o in cm.owners.values())
    return cm


def lag_of(members: Mapping[str, MemberInfo], node_url: str, tp: TopicPartition) -> float:
    lags = [m.lags[tp] for m in members.values() if m.url == node_url and tp in m.lags]
    return min(lags) if lags else float("inf")


def spread(counts: Mapping[str, int], urls: list[str]) -> int:
    values = [counts.get(u, 0) for u in urls]
    return max(values) - min(values)


# --- strategies ---------------------------------------------------------------------------

partitions_st = st.dictionaries(
    st.sampled_from(TOPICS), st.integers(min_value=1, max_value=12), min_size=1, max_size=3
)


@st.composite
def clusters(
    draw: st.DrawFn, hosts: int = 1
) -> tuple[dict[str, MemberInfo], dict[str, int], int, int]:
    """Random members with random (possibly stale, conflicting) reports and lags, their
    nodes on one host or spread over up to *hosts*."""
    partitions = draw(partitions_st)
    tps = all_tps(partitions)
    n = draw(st.integers(min_value=1, max_value=6))
    members = {}
    for i in range(n):
        held = draw(st.lists(st.sampled_from(tps), unique=True, max_size=len(tps)))
        split = draw(st.integers(min_value=0, max_value=len(held)))
        lagged = draw(st.lists(st.sampled_from(tps), unique=True, max_size=len(tps)))
        lags = {
            tp: draw(st.integers(min_value=0, max_value=200))
            for tp in sorted(set(held) | set(lagged))
        }
        host = draw(st.integers(min_value=0, max_value=hosts - 1))
        members[f"m{i}"] = MemberInfo(
            url=url(i) if hosts == 1 else f"http://host{host}:{8100 + i}",
            actives=frozenset(held[:split]),
            standbys=frozenset(held[split:]),
            lags=lags,
        )
    standby_replicas = draw(st.integers(min_value=0, max_value=3))
    acceptable_lag = draw(st.integers(min_value=0, max_value=50))
    return members, partitions, standby_replicas, acceptable_lag


# --- invariants over any input ------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.one_of(clusters(), clusters(hosts=3)))
def test_roles_are_complete_and_never_share_a_node(
    cluster: tuple[dict[str, MemberInfo], dict[str, int], int, int],
) -> None:
    members, partitions, k, acceptable = cluster
    urls = sorted({m.url for m in members.values()})
    cm = assign(members, partitions, standby_replicas=k, acceptable_lag=acceptable)

    assert sorted(cm.owners) == all_tps(partitions)
    for owners in cm.owners.values():
        assert owners.active in urls
        roles = [owners.active, *owners.standbys, *owners.warming]
        assert len(roles) == len(set(roles)), "a node holds two roles of one partition"
        assert set(roles) <= set(urls)
        assert len(owners.warming) <= 1
        # A warming node already follows the changelog: with it, the partition still has
        # the requested number of followers.
        assert len(owners.standbys) == min(k, len(urls) - 1 - len(owners.warming))


@settings(max_examples=150, deadline=None)
@given(st.one_of(clusters(), clusters(hosts=3)))
def test_the_active_is_the_most_caught_up_node_unless_its_target_is_ready(
    cluster: tuple[dict[str, MemberInfo], dict[str, int], int, int],
) -> None:
    members, partitions, k, acceptable = cluster
    urls = sorted({m.url for m in members.values()})
    cm = assign(members, partitions, standby_replicas=k, acceptable_lag=acceptable)

    for tp, owners in cm.owners.items():
        assert owners.active is not None
        lags = {u: lag_of(members, u, tp) for u in urls}
        active_lag = lags[owners.active]
        if any(lag <= acceptable for lag in lags.values()):
            assert active_lag <= acceptable, f"{tp}: a caught-up node exists but {lags}"
        else:
            assert active_lag == min(lags.values())
        for warming in owners.warming:
            assert lags[warming] > acceptable, "a caught-up target should be active already"
            assert lags[warming] > active_lag or active_lag <= acceptable


@settings(max_examples=150, deadline=None)
@given(st.one_of(clusters(), clusters(hosts=3)))
def test_targets_are_balanced_and_so_is_a_map_without_warm_ups(
    cluster: tuple[dict[str, MemberInfo], dict[str, int], int, int],
) -> None:
    members, partitions, k, acceptable = cluster
    urls = sorted({m.url for m in members.values()})
    cm = assign(members, partitions, standby_replicas=k, acceptable_lag=acceptable)

    # Where the active role is headed: the warming node, else the active itself.
    targets = Counter(o.warming[0] if o.warming else o.active for o in cm.owners.values())
    assert spread(targets, urls) <= 1
    if not any(o.warming for o in cm.owners.values()):
        actives = Counter(o.active for o in cm.owners.values())
        assert spread(actives, urls) <= 1
        totals = Counter(actives)
        for o in cm.owners.values():
            totals.update(o.standbys)
        assert spread(totals, urls) <= 1


@settings(max_examples=60, deadline=None)
@given(st.one_of(clusters(), clusters(hosts=3)))
def test_same_input_same_map_whatever_the_member_ids_and_order(
    cluster: tuple[dict[str, MemberInfo], dict[str, int], int, int],
) -> None:
    members, partitions, k, acceptable = cluster
    cm = assign(members, partitions, standby_replicas=k, acceptable_lag=acceptable, generation=3)
    again = assign(members, partitions, standby_replicas=k, acceptable_lag=acceptable, generation=3)
    renamed = {f"x{len(members) - i}": m for i, m in enumerate(reversed(members.values()))}
    shuffled = assign(
        renamed,
        dict(reversed(partitions.items())),
        standby_replicas=k,
        acceptable_lag=acceptable,
        generation=3,
    )
    assert cm == again
    assert cm.to_bytes() == shuffled.to_bytes()
    assert ClusterMap.from_bytes(cm.to_bytes()) == cm


# --- movement when a node leaves or joins ------------------------------------------------

group_st = st.tuples(
    st.integers(min_value=2, max_value=6), partitions_st, st.integers(min_value=0, max_value=2)
)


@settings(max_examples=60, deadline=None)
@given(group_st, st.data())
def test_a_leave_moves_only_the_leavers_actives_to_its_standbys(
    group: tuple[int, dict[str, int], int], data: st.DataObject
) -> None:
    n, partitions, k = group
    urls = [url(i) for i in range(n)]
    before = steady(urls, partitions, k)
    leaver = data.draw(st.sampled_from(urls))
    survivors = [u for u in urls if u != leaver]

    after = assign(reports(before, survivors), partitions, standby_replicas=k, acceptable_lag=10)

    for tp, owners in before.owners.items():
        now = after.owners[tp]
        if owners.active != leaver:
            assert now.active == owners.active, f"{tp} moved although its active stayed"
        elif k > 0:
            # Fail-over: a standby takes over at once, no partition waits for a warm-up.
            assert now.active in owners.standbys
    assert leaver not in after.urls()


@settings(max_examples=60, deadline=None)
@given(group_st)
def test_a_join_moves_nothing_until_the_newcomer_has_warmed_up(
    group: tuple[int, dict[str, int], int],
) -> None:
    n, partitions, k = group
    urls = [url(i) for i in range(n)]
    before = steady(urls, partitions, k)
    newcomer = url(n)
    joined = reports(before, urls)
    joined["member-new"] = MemberInfo(url=newcomer)
    total = len(all_tps(partitions))
    share = {total // (n + 1), -(-total // (n + 1))}

    during = assign(joined, partitions, standby_replicas=k, acceptable_lag=10)

    assert {tp: o.active for tp, o in during.owners.items()} == {
        tp: o.active for tp, o in before.owners.items()
    }, "an active moved to a node that has nothing restored"
    warming = during.warming_of(newcomer)
    assert len(warming) in share
    # Every warm-up heads to the newcomer: the others keep what they had.
    assert all(o.warming in ((), (newcomer,)) for o in during.owners.values())

    after = assign(
        reports(during, [*urls, newcomer]), partitions, standby_replicas=k, acceptable_lag=10
    )

    assert after.actives_of(newcomer) == warming
    moved = [tp for tp in before.owners if before.owners[tp].active != after.owners[tp].active]
    assert sorted(moved) == sorted(warming)
    assert not any(o.warming for o in after.owners.values())


@settings(max_examples=60, deadline=None)
@given(clusters())
def test_caught_up_reports_converge_to_a_balanced_map_without_warm_ups(
    cluster: tuple[dict[str, MemberInfo], dict[str, int], int, int],
) -> None:
    members, partitions, k, acceptable = cluster
    urls = sorted({m.url for m in members.values()})
    cm = assign(members, partitions, standby_replicas=k, acceptable_lag=acceptable)
    # From arbitrary (stale, conflicting) reports a hand-over can take a few rounds; over
    # 3,000 random clusters the worst case was three rebalances after the first map.
    for _ in range(3):
        cm = assign(reports(cm, urls), partitions, standby_replicas=k, acceptable_lag=acceptable)
    assert not any(o.warming for o in cm.owners.values())
    # A fixed point: nothing moves any more.
    again = assign(reports(cm, urls), partitions, standby_replicas=k, acceptable_lag=acceptable)
    assert again.owners == cm.owners


# --- scenarios ----------------------------------------------------------------------------


def test_warm_up_keeps_the_old_active_serving_until_the_new_node_is_caught_up() -> None:
    tp = ("orders", 0)
    partitions = {"orders": 2}
    a, b = url(0), url(1)
    old = MemberInfo(url=a, actives=frozenset({tp, ("orders", 1)}), lags={tp: 0, ("orders", 1): 0})

    # B has just joined: half the actives should go to it, but it has nothing yet.
    cm = assign(
        {"a": old, "b": MemberInfo(url=b)}, partitions, standby_replicas=0, acceptable_lag=5
    )
    assert cm.actives_of(a) == {tp, ("orders", 1)}
    (handed_over,) = cm.warming_of(b)

    # B restores as a standby; 40 behind is not enough yet.
    restoring = MemberInfo(url=b, standbys=frozenset({handed_over}), lags={handed_over: 40})
    cm = assign({"a": old, "b": restoring}, partitions, standby_replicas=0, acceptable_lag=5)
    assert cm.owners[handed_over].active == a
    assert cm.owners[handed_over].warming == (b,)

    # Caught up (within acceptable_lag): the next rebalance moves the active role.
    ready = MemberInfo(url=b, standbys=frozenset({handed_over}), lags={handed_over: 3})
    cm = assign({"a": old, "b": ready}, partitions, standby_replicas=0, acceptable_lag=5)
    assert cm.owners[handed_over].active == b
    assert cm.owners[handed_over].warming == ()
    assert len(cm.actives_of(a)) == len(cm.actives_of(b)) == 1


def test_after_a_failure_the_most_caught_up_standby_takes_over_at_once() -> None:
    tp = ("orders", 0)
    members = {
        "s1": MemberInfo(url=url(1), standbys=frozenset({tp}), lags={tp: 500}),
        "s2": MemberInfo(url=url(2), standbys=frozenset({tp}), lags={tp: 80}),
        "new": MemberInfo(url=url(3)),
    }
    # The previous active is gone; nobody is within acceptable_lag, s2 is the closest.
    cm = assign(members, {"orders": 1}, standby_replicas=1, acceptable_lag=10)
    assert cm.owners[tp].active == url(2)


def test_members_sharing_a_url_are_one_node() -> None:
    tp = ("orders", 0)
    restarted = {
        "old-id": MemberInfo(url=url(0), actives=frozenset({tp}), lags={tp: 50}),
        "new-id": MemberInfo(url=url(0), standbys=frozenset({tp}), lags={tp: 2}),
        "other": MemberInfo(url=url(1)),
    }
    cm = assign(restarted, {"orders": 1}, standby_replicas=1, acceptable_lag=10)
    assert cm.owners[tp].active == url(0)
    assert cm.owners[tp].standbys == (url(1),)
    assert set(cm.nodes) == {url(0), url(1)}
    assert cm.nodes[url(0)] == {tp: 2}


def test_no_members_means_no_owner() -> None:
    cm = assign({}, {"orders": 2}, standby_replicas=1, acceptable_lag=0, generation=4)
    assert cm.generation == 4
    assert [o.active for o in cm.owners.values()] == [None, None]


def test_negative_settings_are_rejected() -> None:
    with pytest.raises(ConfigError, match="standby_replicas"):
        assign({}, {}, standby_replicas=-1, acceptable_lag=0)
    with pytest.raises(ConfigError, match="acceptable_lag"):
        assign({}, {}, standby_replicas=0, acceptable_lag=-1)


def test_a_node_back_from_a_restart_warms_up_the_partitions_it_has_stores_of() -> None:
    urls = [url(0), url(1), url(2)]
    partitions = {"orders": 6}
    cm = steady(urls, partitions, standby_replicas=1)
    back = url(0)
    on_disk = cm.actives_of(back) | cm.standbys_of(back)
    # The other two took everything over; the node returns with its stores, each behind.
    cm = steady(urls[1:], partitions, standby_replicas=1)
    members = reports(cm, urls[1:])
    members["member-back"] = MemberInfo(url=back, lags=dict.fromkeys(on_disk, 500))
    after = assign(members, partitions, standby_replicas=1, acceptable_lag=10)
    taking = after.warming_of(back)
    assert len(taking) == 2  # its share of actives, each warming up first ...
    assert taking <= on_disk  # ... from the stores it has: only their tails to replay
    assert not after.actives_of(back)


@pytest.mark.parametrize("back_index", [0, 1, 2])
def test_a_node_back_within_the_acceptable_lag_follows_only_the_stores_it_has(
    back_index: int,
) -> None:
    # The others held everything while it was away; a node holding state for every
    # partition must not crowd the returning node out of the partitions it has on disk.
    urls = [url(0), url(1), url(2)]
    partitions = {"orders": 6}
    cm = steady(urls, partitions, standby_replicas=1)
    back = urls[back_index]
    on_disk = cm.actives_of(back) | cm.standbys_of(back)
    others = [u for u in urls if u != back]
    members = reports(steady(others, partitions, standby_replicas=1), others)
    members["member-back"] = MemberInfo(url=back, lags=dict.fromkeys(on_disk, 5))
    after = assign(members, partitions, standby_replicas=1, acceptable_lag=10)
    held = after.actives_of(back) | after.standbys_of(back) | after.warming_of(back)
    assert len(after.actives_of(back)) == 2
    assert held == on_disk


def _host(node_url: str) -> str:
    return node_url.split("//")[1].split(":")[0]


def _standbys_sharing_a_host(cm: ClusterMap) -> int:
    shared = 0
    for owners in cm.owners.values():
        assert owners.active is not None
        replicas = [owners.active, *owners.warming]
        for standby in owners.standbys:
            shared += any(_host(standby) == _host(r) for r in replicas)
            replicas.append(standby)
    return shared


def test_standbys_go_to_another_host_than_their_partition_s_other_replicas() -> None:
    urls = ["http://a:8100", "http://a:8101", "http://b:8100", "http://b:8101"]
    cm = steady(urls, {"orders": 8, "users": 4}, standby_replicas=1)
    assert _standbys_sharing_a_host(cm) == 0
    totals = Counter(o.active for o in cm.owners.values())
    for o in cm.owners.values():
        totals.update(o.standbys)
    assert spread(totals, urls) <= 1


def test_a_host_with_one_node_takes_standbys_only_up_to_its_share() -> None:
    # Two nodes on host a, one on host b: b cannot follow all of a's actives without
    # holding far more than its share, so the rest share a host, and loads stay even.
    urls = ["http://a:8100", "http://a:8101", "http://b:8100"]
    cm = steady(urls, {"orders": 6}, standby_replicas=1)
    totals = Counter(o.active for o in cm.owners.values())
    for o in cm.owners.values():
        totals.update(o.standbys)
    assert spread(totals, urls) <= 1
    on_b = [tp for tp, o in cm.owners.items() if "http://b:8100" in o.standbys]
    assert len(on_b) == totals["http://b:8100"] - len(cm.actives_of("http://b:8100"))
    assert all(_host(cm.owners[tp].active or "") == "a" for tp in on_b)
    # Of a's four actives, b follows two (its share); the other two are followed on a.
    assert _standbys_sharing_a_host(cm) == 2


def test_misplaced_counts_reach_every_member_in_the_map() -> None:
    members = {
        "m1": MemberInfo("http://a:1", misplaced={("t", 0): 3, ("t", 2): 1}),
        "m2": MemberInfo("http://b:1", misplaced={("t", 0): 5}),
        "m3": MemberInfo("http://c:1"),
    }
    cm = assign(members, {"t": 3}, standby_replicas=1, acceptable_lag=0)
    assert cm.misplaced == {("t", 0): 5, ("t", 2): 1}  # the most any replica counted
    assert ClusterMap.from_bytes(cm.to_bytes()).misplaced == cm.misplaced
    assert cm.with_generation(7).misplaced == cm.misplaced
    info = members["m1"]
    assert MemberInfo.from_bytes(info.to_bytes()) == info
    # A member of an earlier version sends no counts: none are assumed.
    assert MemberInfo.from_bytes(b'{"url": "http://d:1"}').misplaced == {}


def test_two_nodes_advertising_one_url_are_never_merged() -> None:
    url = "http://0.0.0.0:8100"
    members = {
        "m-late": MemberInfo(url, instance="node-b", started_ms=2_000),
        "m-early": MemberInfo(url, instance="node-a", started_ms=1_000),
        "m-other": MemberInfo("http://10.0.0.3:8100", instance="node-c", started_ms=500),
    }
    cm = assign(members, {"t": 6}, standby_replicas=1, acceptable_lag=0)
    assert cm.refused == {"node-b": url}  # the later one holds nothing
    assert set(cm.nodes) == {url, "http://10.0.0.3:8100"}
    # Balanced over the two nodes that count: 3 actives each, a standby elsewhere.
    assert Counter(o.active for o in cm.owners.values()) == {url: 3, "http://10.0.0.3:8100": 3}
    assert ClusterMap.from_bytes(cm.to_bytes()).refused == cm.refused


def test_members_of_one_node_and_of_earlier_versions_stay_merged() -> None:
    url = "http://10.0.0.1:8100"
    restarted = {  # the old process's member lingers until its session times out
        "m-old": MemberInfo(url, instance="node-a", started_ms=1_000),
        "m-new": MemberInfo(url, instance="node-a", started_ms=9_000),
    }
    assert assign(restarted, {"t": 2}, standby_replicas=0, acceptable_lag=0).refused == {}
    unversioned = {"m1": MemberInfo(url), "m2": MemberInfo(url)}
    assert assign(unversioned, {"t": 2}, standby_replicas=0, acceptable_lag=0).refused == {}


@settings(max_examples=100, deadline=None)
@given(clusters(), st.sampled_from(TOPICS))
def test_a_global_topic_is_held_by_every_node_and_the_rest_as_before(
    cluster: tuple[dict[str, MemberInfo], dict[str, int], int, int], everywhere: str
) -> None:
    members, partitions, standby_replicas, acceptable_lag = cluster
    cm = assign(
        members,
        partitions,
        standby_replicas=standby_replicas,
        acceptable_lag=acceptable_lag,
        everywhere={everywhere},
    )
    urls = {m.url for m in members.values()}
    for tp, owners in cm.owners.items():
        held = {owners.active, *owners.standbys, *owners.warming}
        if tp[0] == everywhere:
            assert held == urls  # every node: the active, warming or a standby
            assert len(owners.standbys) + len(owners.warming) == len(urls) - 1
        else:  # the requested standbys, fewer by one while a node warms the partition up
            want = min(standby_replicas, len(urls) - 1 - len(owners.warming))
            assert len(owners.standbys) == want


def test_a_global_topic_s_actives_are_balanced_with_the_others() -> None:
    urls = [url(i) for i in range(3)]
    cm = assign(
        {f"member-{u}": MemberInfo(url=u) for u in urls},
        {"orders": 6, "users": 3},
        standby_replicas=1,
        acceptable_lag=10,
        everywhere={"users"},
    )
    actives = Counter(o.active for o in cm.owners.values())
    assert spread(actives, urls) <= 1
    for p in range(3):
        owners = cm.owners[("users", p)]
        assert {owners.active, *owners.standbys} == set(urls)
    for p in range(6):
        assert len(cm.owners[("orders", p)].standbys) == 1


def _check_invariants(cm: ClusterMap, urls: list[str], tps: list[TopicPartition], n: int) -> None:
    assert sorted(cm.owners) == tps
    for tp, o in cm.owners.items():
        assert o.active in urls, tp
        followers = [*o.standbys, *o.warming]
        assert o.active not in followers, tp
        assert len(set(followers)) == len(followers), tp
        assert len(o.standbys) == n, tp  # nodes enough: a warm-up is on top
    load = Counter(u for o in cm.owners.values() for u in (o.active, *o.standbys, *o.warming))
    assert max(load.values()) - min(load[u] for u in urls) <= 1


@pytest.mark.parametrize("hosts", ["one host", "a host per node"])
def test_100_nodes_and_3000_partitions_are_assigned_in_well_under_a_second(hosts: str) -> None:
    """A group forming (nobody holds anything), then at rest (everyone reports its
    replicas), then one node joining and another leaving: the invariants hold and each
    assignment takes a fraction of a second (the leader runs it on its event loop)."""
    import time

    node = url if hosts == "one host" else (lambda i: f"http://node-{i}.svc:8100")
    urls = [node(i) for i in range(100)]
    partitions = {f"table{t}": 300 for t in range(10)}
    tps = all_tps(partitions)
    took = []

    def timed(members: Mapping[str, MemberInfo]) -> ClusterMap:
        started = time.perf_counter()
        cm = assign(members, partitions, standby_replicas=1, acceptable_lag=10)
        took.append(time.perf_counter() - started)
        return cm

    fresh = timed({f"member-{u}": MemberInfo(url=u) for u in urls})
    _check_invariants(fresh, urls, tps, 1)
    assert not any(o.warming for o in fresh.owners.values())
    assert set(Counter(o.active for o in fresh.owners.values()).values()) == {30}
    at_rest = timed(reports(fresh, urls))
    assert at_rest.owners == fresh.owners  # sticky: nothing moves
    moved = reports(at_rest, urls)
    del moved[f"member-{urls[7]}"]
    moved["member-new"] = MemberInfo(url=node(100))
    after = timed(moved)
    survivors = [u for u in urls if u != urls[7]] + [node(100)]
    _check_invariants(after, survivors, tps, 1)
    # The leaver's actives went to their standbys (caught up); the newcomer only warms up.
    for tp in at_rest.actives_of(urls[7]):
        assert after.owners[tp].active == at_rest.owners[tp].standbys[0]
    assert not after.actives_of(node(100))
    assert after.warming_of(node(100))
    print(f"{hosts}: fresh / at rest / join+leave took " + " / ".join(f"{t:.3f}" for t in took))
    assert max(took) < 1.0
