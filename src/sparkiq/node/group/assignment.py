"""Decides who serves what: group members and changelog partitions in, a `ClusterMap` out.

A pure function, run by the group leader during a rebalance
(`sparkiq.node.group.membership`), in the manner of Kafka Streams'
HighAvailabilityTaskAssignor:

1. **Balanced, sticky targets.** Every partition gets one target node for its active role;
   per-node active counts differ by at most one. A node keeps the actives it reported as long
   as that stays balanced; partitions that must move go first to a node that is already
   caught up on them (a standby), then to the node with the smallest lag, then to the least
   loaded node.
2. **Warm-up.** A partition's active role goes to its target only when the target is caught
   up (lag <= ``acceptable_lag``), or when no node is more caught up than the target. Else the
   most caught-up node keeps serving it (the current active if it is caught up: no needless
   move) and the target is listed in ``warming``: it restores the partition like a standby,
   reports a small lag at a later rebalance (`GroupMember.request_rebalance`) and gets the
   active role then. After a failure the most caught-up surviving replica is promoted at once.
3. **Standbys.** ``min(standby_replicas, nodes - 1)`` standbys per partition, never on the
   active's node nor on a node warming that partition (a warming node already follows the
   changelog; while it does, the partition has that many fewer standbys, so its followers
   still number at least the requested replicas). Nodes that hold state for the partition
   are preferred, the node with the least state to spare first, so that a node back from a
   restart follows the stores it has rather than restoring others from scratch. A standby
   goes to another host (the host name of the node's URL) than the partition's other
   replicas while a node there has room. Total replicas per node (actives, warm-ups and
   standbys) are then evened out; even loads come before spread hosts.
4. **Global tables.** The partitions of the topics in ``everywhere`` get an active (and a
   warm-up) as above, and every other node as a standby: each node keeps a whole copy,
   outside the standby count and the evening-out of loads.

Node identity is the URL. Two group members reporting the same URL (a node restarted before
the broker expired its previous member id) are treated as one node: what they hold is merged
and the lower lag of the two counts, since both describe the same state directory. The result
is deterministic: members are ordered by URL and partitions by (topic, partition), never by
arrival order or member id.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from sparkiq.core.errors import ConfigError
from sparkiq.core.topology import ClusterMap, MemberInfo, PartitionOwners, TopicPartition

# Sorts after every real lag: a node without a store for the partition.
_NO_STATE = float("inf")


@dataclass
class _Node:
    """One node as the members' reports describe it (members sharing a URL merged)."""

    url: str
    actives: set[TopicPartition] = field(default_factory=set)
    standbys: set[TopicPartition] = field(default_factory=set)
    lags: dict[TopicPartition, int] = field(default_factory=dict)


def assign(
    members: Mapping[str, MemberInfo],
    partitions: Mapping[str, int],
    *,
    standby_replicas: int,
    acceptable_lag: int,
    generation: int = -1,
    everywhere: Collection[str] = frozenset(),
) -> ClusterMap:
    """Assign every partition of *partitions* (topic -> count) to the nodes of *members*.

    *members* is keyed by group member id; the returned map is keyed by node URL. The
    partitions of the topics in *everywhere* (global tables) go to every node.
    """
    if standby_replicas < 0:
        raise ConfigError(f"standby_replicas must be 0 or more, got {standby_replicas}")
    if acceptable_lag < 0:
        raise ConfigError(f"acceptable_lag must be 0 or more, got {acceptable_lag}")
    kept, refused = _one_member_per_url(members)
    nodes = _merge_by_url(kept)
    tps = sorted((topic, p) for topic, count in partitions.items() for p in range(count))
    reported = {url: dict(node.lags) for url, node in sorted(nodes.items())}
    if not nodes:
        return ClusterMap(
            generation=generation,
            owners={tp: PartitionOwners(None) for tp in tps},
            nodes={},
            misplaced=_misplaced(members),
            refused=refused,
        )

    state = _State(nodes, acceptable_lag)
    targets = _balanced_targets(tps, state)
    actives, warming = _apply_warm_up(tps, targets, state)
    spread = [tp for tp in tps if tp[0] not in everywhere]
    standbys = _place_standbys(spread, actives, warming, standby_replicas, state)
    for tp in tps:
        if tp[0] in everywhere:
            standbys[tp] = {u for u in state.urls if u not in (actives[tp], warming.get(tp))}
    owners = {
        tp: PartitionOwners(
            active=actives[tp],
            standbys=tuple(sorted(standbys[tp])),
            warming=(warming[tp],) if tp in warming else (),
        )
        for tp in tps
    }
    return ClusterMap(
        generation=generation,
        owners=owners,
        nodes=reported,
        misplaced=_misplaced(members),
        refused=refused,
    )


def _one_member_per_url(
    members: Mapping[str, MemberInfo],
) -> tuple[list[MemberInfo], dict[str, str]]:
    """The members that keep their URL, and the refused ones (instance -> URL).

    Two nodes that advertise one URL (say both `http://0.0.0.0:8100`) cannot both be
    reached there: merged, each would hold the other's partitions and forwards would reach
    either. The one that started first keeps the URL (then the lower member id); the others
    hold nothing. Members with one node id are one node (a restarted process whose old
    member has not timed out yet) and stay merged, as are members of an earlier version,
    which send no node id.
    """
    by_url: dict[str, list[tuple[int, str, MemberInfo]]] = {}
    for member_id, info in members.items():
        by_url.setdefault(info.url, []).append((info.started_ms, member_id, info))
    kept: list[MemberInfo] = []
    refused: dict[str, str] = {}
    for url, claims in by_url.items():
        claims.sort(key=lambda claim: (claim[0], claim[1]))
        first = claims[0][2]
        kept.append(first)
        for _, _, info in claims[1:]:
            if info.instance and info.instance != first.instance:
                refused[info.instance] = url
            else:
                kept.append(info)
    return kept, refused


def _misplaced(members: Mapping[str, MemberInfo]) -> dict[TopicPartition, int]:
    """Misplaced records per partition: the most any member reported (replicas of one
    partition hold the same records, some further along than others)."""
    out: dict[TopicPartition, int] = {}
    for info in members.values():
        for tp, n in info.misplaced.items():
            out[tp] = max(n, out.get(tp, 0))
    return out


def _merge_by_url(members: Iterable[MemberInfo]) -> dict[str, _Node]:
    nodes: dict[str, _Node] = {}
    for info in members:
        node = nodes.setdefault(info.url, _Node(info.url))
        node.actives.update(info.actives)
        node.standbys.update(info.standbys)
        for tp, lag in info.lags.items():
            # Both reports describe one state directory; the smaller lag is the fresher one.
            node.lags[tp] = min(lag, node.lags.get(tp, lag))
    return nodes


class _State:
    """Lag look-ups and the previous owner of each partition, over the merged nodes."""

    def __init__(self, nodes: Mapping[str, _Node], acceptable_lag: int) -> None:
        self.nodes = nodes
        self.urls = sorted(nodes)
        self.acceptable_lag = acceptable_lag
        self.previous_active: dict[TopicPartition, str] = {}
        # The nodes holding state (a store, any lag) for each partition, in URL order: the
        # only ones whose lag is not _NO_STATE, so the loops over partitions ask them alone
        # (100 nodes x 3,000 partitions would otherwise be 300,000 look-ups per loop).
        self.holders: dict[TopicPartition, list[str]] = {}
        for url in self.urls:
            for tp in nodes[url].lags:
                self.holders.setdefault(tp, []).append(url)
        claims: dict[TopicPartition, list[str]] = {}
        for url in self.urls:
            for tp in nodes[url].actives:
                claims.setdefault(tp, []).append(url)
        for tp, urls in claims.items():
            # Several claims happen only with stale reports; trust the freshest one.
            self.previous_active[tp] = min((self.lag(u, tp), u) for u in urls)[1]

    def lag(self, url: str, tp: TopicPartition) -> float:
        lag = self.nodes[url].lags.get(tp)
        return _NO_STATE if lag is None else lag

    def is_caught_up(self, url: str, tp: TopicPartition) -> bool:
        return self.lag(url, tp) <= self.acceptable_lag

    def readiness(self, url: str, tp: TopicPartition) -> tuple[int, float, float, str]:
        """Sort key: the node best placed to serve *tp* right now comes first.

        Among caught-up nodes the current active wins over a smaller lag (no move for a
        difference within the acceptable lag); among the others the smaller lag wins.
        """
        is_previous = 0 if self.previous_active.get(tp) == url else 1
        if self.is_caught_up(url, tp):
            return (0, is_previous, self.lag(url, tp), url)
        return (1, self.lag(url, tp), is_previous, url)

    def is_ahead_of(self, url: str, other: str, tp: TopicPartition) -> bool:
        """Whether *url* should serve *tp* rather than *other*, which is not caught up."""
        if self.is_caught_up(url, tp):
            return True
        return self.lag(url, tp) < self.lag(other, tp)


class _Slots:
    """Per-node active capacity: ``base`` each, plus one for ``extra`` of the nodes."""

    def __init__(self, total: int, urls: list[str]) -> None:
        self.base, self.extra = divmod(total, len(urls))
        self.count = dict.fromkeys(urls, 0)

    def has_room(self, url: str) -> bool:
        n = self.count[url]
        return n < self.base or (n == self.base and self.extra > 0)

    def take(self, url: str) -> None:
        if self.count[url] == self.base:
            self.extra -= 1
        self.count[url] += 1


def _balanced_targets(tps: list[TopicPartition], state: _State) -> dict[TopicPartition, str]:
    urls = state.urls
    slots = _Slots(len(tps), urls)
    wanted = set(tps)
    kept: dict[str, list[TopicPartition]] = {url: [] for url in urls}
    for tp, url in state.previous_active.items():
        if tp in wanted:
            kept[url].append(tp)
    # Nodes holding fewer than their share must receive actives: newcomers, or nodes that
    # warmed partitions up for a hand-over and now report them caught up.
    hungry = {url for url in urls if len(kept[url]) < slots.base}

    holders = state.holders

    def hand_over_is_ready(url: str, tp: TopicPartition) -> bool:
        # A caught-up node holds state: only the holders can be.
        return any(
            o != url and o in hungry and state.is_caught_up(o, tp) for o in holders.get(tp, ())
        )

    def hungry_has_state(url: str, tp: TopicPartition) -> bool:
        return any(o != url and o in hungry for o in holders.get(tp, ()))

    for url in urls:
        # A node over its share gives up first what a hungry node is already caught up on:
        # that hand-over needs no (further) warm-up, so the same targets come out again
        # at the next rebalance and the warm-up converges. Next, what a hungry node holds
        # a store of (a node back from a restart replays only the tail of those); both
        # facts stay true while the warm-up runs, so the targets stay put.
        ranked = sorted(
            (hand_over_is_ready(url, tp), hungry_has_state(url, tp), tp) for tp in kept[url]
        )
        kept[url] = [tp for *_, tp in ranked]

    targets: dict[TopicPartition, str] = {}

    def give(tp: TopicPartition, url: str) -> None:
        targets[tp] = url
        slots.take(url)

    # Sticky: everyone keeps up to the base share. The extra slots go first to nodes whose
    # next partition nobody else is ready for, then to those that held the most, so that a
    # join or a leave moves as few actives as possible.
    for url in urls:
        for tp in kept[url][: slots.base]:
            give(tp, url)
    over = [url for url in urls if len(kept[url]) > slots.base]
    for url in sorted(
        over,
        key=lambda u: (hand_over_is_ready(u, kept[u][slots.base]), -len(kept[u]), u),
    ):
        if slots.has_room(url):
            give(kept[url][slots.base], url)

    # The rest: first to nodes already caught up, then by lag, then to the least loaded.
    free = [tp for tp in tps if tp not in targets]
    for tp in free:
        ready = [u for u in holders.get(tp, ()) if slots.has_room(u) and state.is_caught_up(u, tp)]
        if ready:
            give(tp, min((state.lag(u, tp), slots.count[u], u) for u in ready)[2])
    # A node with state (a finite lag) comes before every node without; among those, the
    # least loaded, then the first URL: a heap of (count, url), whose stale entries (the
    # count has grown since) and full nodes (a full node never has room again) are dropped.
    least: list[tuple[int, str]] = [(slots.count[u], u) for u in urls if slots.has_room(u)]
    heapq.heapify(least)
    for tp in free:
        if tp in targets:
            continue
        room = [u for u in holders.get(tp, ()) if slots.has_room(u)]
        if room:
            url = min((state.lag(u, tp), slots.count[u], u) for u in room)[2]
        else:
            while slots.count[least[0][1]] != least[0][0] or not slots.has_room(least[0][1]):
                heapq.heappop(least)
            url = least[0][1]
        give(tp, url)
        if slots.has_room(url):
            heapq.heappush(least, (slots.count[url], url))
    return targets


def _apply_warm_up(
    tps: list[TopicPartition], targets: Mapping[TopicPartition, str], state: _State
) -> tuple[dict[TopicPartition, str], dict[TopicPartition, str]]:
    """Actives after warm-up, and the target warming each partition that waits for it."""
    actives: dict[TopicPartition, str] = {}
    warming: dict[TopicPartition, str] = {}
    for tp in tps:
        target = targets[tp]
        actives[tp] = target
        if state.is_caught_up(target, tp):
            continue
        # A node without state is never ahead of the target (its lag is no smaller), and
        # every holder's readiness sorts before it: the holders alone decide.
        holders = state.holders.get(tp)
        if not holders:
            continue
        best = min(state.readiness(u, tp) for u in holders)[3]
        if best != target and state.is_ahead_of(best, target, tp):
            actives[tp] = best
            warming[tp] = target
    return actives, warming


def _host(url: str) -> str:
    """The host a node runs on, as its URL names it (nodes of one host share a failure)."""
    return urlsplit(url).hostname or url


def _place_standbys(
    tps: list[TopicPartition],
    actives: Mapping[TopicPartition, str],
    warming: Mapping[TopicPartition, str],
    standby_replicas: int,
    state: _State,
) -> dict[TopicPartition, set[str]]:
    urls = state.urls
    host = {u: _host(u) for u in urls}
    # A node's load is every replica it keeps: its actives and what it warms up.
    load = dict.fromkeys(urls, 0)
    for tp in tps:
        load[actives[tp]] += 1
        if tp in warming:
            load[warming[tp]] += 1
    need = {tp: min(standby_replicas, len(urls) - 1 - (1 if tp in warming else 0)) for tp in tps}
    total = len(tps) + sum(tp in warming for tp in tps) + sum(need.values())
    cap = -(-total // len(urls))
    standbys: dict[TopicPartition, set[str]] = {tp: set() for tp in tps}

    def is_free(url: str, tp: TopicPartition) -> bool:
        return url != actives[tp] and url != warming.get(tp) and url not in standbys[tp]

    def shares_host(url: str, tp: TopicPartition, without: str | None = None) -> bool:
        """Whether a replica of *tp* other than *url* (and *without*) runs on *url*'s host."""
        others = [actives[tp], *standbys[tp]]
        if tp in warming:
            others.append(warming[tp])
        return any(host[o] == host[url] for o in others if o not in (url, without))

    several_hosts = len(set(host.values())) > 1

    def another_host_has_room(tp: TopicPartition) -> bool:
        return several_hosts and any(
            load[u] < cap and is_free(u, tp) and not shares_host(u, tp) for u in urls
        )

    # Sticky: a node holding state for a partition (a store on disk, from a standby or a
    # previous active role) replays only its tail. Nodes take standbys of what they hold,
    # the most constrained first: the node with the least held state beyond the room it has
    # left. Otherwise nodes that hold everything (the survivors of a failure) fill up with
    # the first partitions, and a node back from a restart gets the last ones, which it
    # restores from scratch while its own stores are served by others. A standby on the
    # host of another replica of its partition is left for later while a node on another
    # host has room for it: a host's failure should not take every copy of a partition.
    wanted = set(tps)
    held = {
        u: [tp for tp in sorted(state.nodes[u].lags) if tp in wanted and is_free(u, tp)]
        for u in urls
    }
    for url in sorted(urls, key=lambda u: (len(held[u]) - (cap - load[u]), u)):
        for tp in sorted(held[url], key=lambda t: (state.lag(url, t), t)):
            if load[url] >= cap:
                break
            if len(standbys[tp]) >= need[tp] or not is_free(url, tp):
                continue
            if shares_host(url, tp) and another_host_has_room(tp):
                continue
            standbys[tp].add(url)
            load[url] += 1
    # The rest, each to the best node by (full, shares a host, load, lag, URL). The nodes
    # are walked in (full, load, URL) order and the walk stops at the first load past the
    # best found: what comes later cannot beat it.
    #   Once the best shares no host (or there is one host, where every node shares it),
    # only a node of the same (full, load) with a smaller lag, i.e. a holder of state, can
    # still beat it (the walk meets URLs in order).
    by_load = sorted((load[u] >= cap, load[u], u) for u in urls)
    for tp in tps:
        holding = state.holders.get(tp, ())
        while len(standbys[tp]) < need[tp]:
            best: tuple[bool, bool, int, float, str] | None = None
            for full, n, u in by_load:
                if best is not None:
                    if full and not best[0]:
                        break
                    if not best[1] or not several_hosts:
                        if (full, n) > (best[0], best[2]):
                            break
                        if u not in holding:
                            continue
                if not is_free(u, tp):
                    continue
                shares = shares_host(u, tp) if several_hosts else True
                key = (full, shares, n, state.lag(u, tp), u)
                if best is None or key < best:
                    best = key
            if best is None:  # need[tp] < nodes - replicas: never
                raise AssertionError(f"no node is free for a standby of {tp}")
            url = best[4]
            by_load.remove((best[0], best[2], url))
            standbys[tp].add(url)
            load[url] += 1
            bisect.insort(by_load, (load[url] >= cap, load[url], url))

    _even_out(tps, standbys, is_free, shares_host, load, state)
    return standbys


def _even_out(
    tps: list[TopicPartition],
    standbys: dict[TopicPartition, set[str]],
    is_free: Callable[[str, TopicPartition], bool],
    shares_host: Callable[[str, TopicPartition, str | None], bool],
    load: dict[str, int],
    state: _State,
) -> None:
    """Move standbys from the most to the least loaded nodes until loads differ by <= 1.

    A move prefers a partition whose standby does not come to share a host with another of
    its replicas (balance comes first, though), then one the receiving node holds state for.
    """
    for _ in range(sum(len(s) for s in standbys.values()) + 1):
        moved = False
        by_load = sorted(load, key=lambda u: (load[u], u))
        for low in by_load:
            for high in reversed(by_load):
                if load[high] - load[low] <= 1:
                    break
                movable = [t for t in tps if high in standbys[t] and is_free(low, t)]
                if movable:
                    tp = min(
                        movable,
                        key=lambda t: (
                            not shares_host(high, t, None) and shares_host(low, t, high),
                            state.lag(low, t),
                            t,
                        ),
                    )
                    standbys[tp].discard(high)
                    standbys[tp].add(low)
                    load[high] -= 1
                    load[low] += 1
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return
