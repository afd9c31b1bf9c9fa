"""The one read loop: every read of a table's partitions finds its replicas here -- one key,
the windows of a key, a multi-get, a probe, a range page.

Round after round, each partition still to read goes where `PartitionRoutes.route` says:

1. this node's replica, if it may answer (the active, or a standby within the call's
   `max_lag`): read here;
2. else the active, on another node: asked at most `active_timeout_s`, one request per node
   for all the partitions it is asked for, every node in parallel;
3. once the active cannot answer -- unreachable or slow, a 503 (restoring), none in the map,
   or this node's own active replica still restoring -- a replica within the call's lag
   bound (`max_lag=N` if the request gave one, else `standby_max_lag`): this node's own
   standby or restoring replica first, then each other standby in turn, asked with the
   internal `fallback_lag` parameter (answer from your replica or 503 at once, never
   forward);
4. nobody could: wait for a change of the view (a short pause after an unreachable node),
   then the active again, until the budget is spent (503 + Retry-After). A node that has no
   map yet (starting up) and knows of nobody holding the partition answers 503 at once, so
   the caller asks another node.

An active that answers 508 (past the hop limit: the nodes disagree on the owner while a
rebalance spreads) is stood in for by this node's replicas when it has one for every
partition asked; else its 508 is the answer. What a read does with a replica or an answer is
its own (`Reads`): one key answers from the first, a multi-get merges them all.

Answers from a stand-in say `"standby": true` and the changelog offset their replica had
reached, like every read.

A read with a consistency token (`Call.after`) takes only replicas at or past the token's
offset of their partition: a local standby behind it sends the read to the active as step 2,
a local active behind it waits (looking again every `TOKEN_RECHECK_S`), stand-ins behind it
are passed over (one asked with `fallback_lag` answers 503 at once). A read with
`after_source` first waits for the pipeline's progress to turn it into such a token
(`sparkiq.http.reads.aftersource`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol

from sparkiq.core.queries import Failure
from sparkiq.core.topology import TopicPartition
from sparkiq.http.forwarder import Unreachable
from sparkiq.http.messages.responses import Answer, Outcome, Response, error_message, failed
from sparkiq.http.reads import aftersource
from sparkiq.http.reads.apiparts import ApiParts
from sparkiq.http.reads.locate import RECHECK_S, Call, LocalReplica, Locator, fallback_target

Asked = Response | Failure | Unreachable
# How often a read whose token is ahead of this node's active looks at it again.
TOKEN_RECHECK_S = 0.005


class Ask(NamedTuple):
    """A node to ask for some partitions: their active, or (`as_stand_in`) a standby asked
    to answer from its own replica within the call's lag bound."""

    url: str
    as_stand_in: bool


class Reads(Protocol):
    """What one read does with the replicas the loop finds for its partitions."""

    def local(self, tp: TopicPartition, replica: LocalReplica) -> Answer | None:
        """Read `tp` from this node's replica; an answer ends the read with it."""
        ...

    def request(self, tps: Sequence[TopicPartition]) -> tuple[str, str, bytes | None]:
        """The method, target and body that ask another node for `tps`."""
        ...

    def take(self, url: str, tps: Sequence[TopicPartition], answer: Response) -> Answer | None:
        """The answer of the node at `url` for `tps` (not a 503 or 508); an answer ends the
        read with it."""
        ...


class PartitionRoutes:
    """Where each partition of one read is read, round after round (the module's steps)."""

    def __init__(self, locator: Locator, call: Call) -> None:
        self._locator = locator
        self._call = call
        self._failed_actives: set[TopicPartition] = set()
        self._tried: dict[TopicPartition, set[str]] = {}  # stand-ins asked in vain
        self._unreachable = False  # since the last wait
        self._behind = False  # an active here waits to reach the token's offsets
        self.bound = call.stand_in_bound(locator.settings)
        self.last_why = ""

    def route(self, tp: TopicPartition) -> LocalReplica | Ask | Failure | None:
        """This round's replica for `tp`: read here, ask a node, fail now, or wait (None)."""
        call, locator = self._call, self._locator
        if call.fallback_lag is not None:
            only = locator.local_only(tp, call.fallback_lag)
            if isinstance(only, LocalReplica) and not call.fresh(tp, only):
                return locator.behind(tp, only, call)
            return only
        found = locator.resolve(tp, call.max_lag)
        if isinstance(found, LocalReplica):
            if call.fresh(tp, found):
                return found
            if not found.is_standby:
                # This node's active has not applied the token's offsets yet: only it can.
                self._behind = True
                self.last_why = locator.behind(tp, found, call).message
                return None
            # A standby behind the token: the active, as if the call had no lag bound.
            found = locator.resolve(tp, None)
        if isinstance(found, str) and tp not in self._failed_actives:
            return Ask(found, False)
        # The active cannot answer: asked in vain, none in the map, or still restoring here.
        local = self.stand_in(tp)
        if local is not None:
            return local
        tried = self._tried.setdefault(tp, set())
        for url in locator.standby_urls(tp):
            if url not in tried:
                return Ask(url, True)
        # Everyone asked in vain: wait, then the active again, then the standbys again.
        tried.clear()
        self._failed_actives.discard(tp)
        if isinstance(found, Failure):
            self.last_why = found.message
            placement = locator.view.placement(tp)
            nobody = placement.active is None and not placement.standbys
            if nobody and not locator.view.is_ready():
                # No map yet (starting up): answer now, so the caller asks another node.
                return locator.gave_up(call, found.message)
        return None

    def stand_in(self, tp: TopicPartition) -> LocalReplica | None:
        """This node's replica of `tp` if it may answer for the active, within the lag bound
        and the call's token."""
        local = self._locator.stand_in(tp, self.bound)
        if local is None or not self._call.fresh(tp, local):
            return None
        return local

    def unanswered(self, ask: Ask, tps: Iterable[TopicPartition], answer: Asked) -> None:
        """`ask` got no answer, a 503, or (a stand-in) a 508 for `tps`: the next round asks
        someone else."""
        if ask.as_stand_in:
            for tp in tps:
                self._tried.setdefault(tp, set()).add(ask.url)
        else:
            self._failed_actives.update(tps)
        who = f"{'standby' if ask.as_stand_in else 'active'} {ask.url}"
        if isinstance(answer, Unreachable):
            self._unreachable = True
            self.last_why = f"{who} is unreachable ({answer.message})"
        elif isinstance(answer, Response):
            said = error_message(answer)
            self.last_why = f"{who} answered {answer.status}" + (f" ({said})" if said else "")
        else:
            self.last_why = f"{who}: {answer.message}"

    def pause_s(self) -> float:
        """How long to wait for the view before the next round."""
        unreachable, self._unreachable = self._unreachable, False
        behind, self._behind = self._behind, False
        if behind:
            return TOKEN_RECHECK_S
        return self._locator.settings.reconnect_pause_s if unreachable else RECHECK_S


async def read_partitions(
    api: ApiParts,
    call: Call,
    tps: Iterable[TopicPartition],
    reads: Reads,
    asked: Mapping[Ask, Response | Unreachable] | None = None,
) -> Answer | None:
    """Read `tps` as the module says; None once every one is read and `reads` has them all.

    `asked`: what a node already answered for the first round's ask of it (the key path
    asks the active before it comes here).
    """
    if call.after_source is not None:
        waited = await aftersource.reach(api.view, api.settings, call)
        if waited is not None:
            return failed(waited)
    locator = api.locator
    routes = PartitionRoutes(locator, call)
    first = dict(asked) if asked else {}
    pending = list(tps)
    while pending:
        remote: dict[Ask, list[TopicPartition]] = {}
        waiting: list[TopicPartition] = []
        for tp in pending:
            found = routes.route(tp)
            if isinstance(found, LocalReplica):
                done = reads.local(tp, found)
                if done is not None:
                    return done
            elif isinstance(found, Ask):
                remote.setdefault(found, []).append(tp)
            elif found is None:
                waiting.append(tp)
            else:
                return failed(found)
        again: list[TopicPartition] = []
        if remote:
            asks = list(remote)
            sending = [
                _send(api, call, ask, remote[ask], reads, routes.bound, first) for ask in asks
            ]
            # One node to ask (the common case): no task to make for it.
            answers = [await sending[0]] if len(sending) == 1 else await asyncio.gather(*sending)
            for ask, answer in zip(asks, answers, strict=True):
                asked_tps = remote[ask]
                if isinstance(answer, Response) and answer.status not in (503, 508):
                    done = reads.take(ask.url, asked_tps, answer)
                    if done is not None:
                        return done
                    continue
                if isinstance(answer, Unreachable):
                    api.metrics.forward_failed(answer)
                elif not ask.as_stand_in and (isinstance(answer, Failure) or answer.status == 508):
                    # Past the hop limit: this node's replicas may answer; else the 508 does.
                    done = _stand_in_here(routes, reads, asked_tps, answer)
                    if done is not None:
                        return done
                    continue
                routes.unanswered(ask, asked_tps, answer)
                again.extend(asked_tps)
        pending = again + waiting
        if waiting:
            if not await locator.wait(call, routes.pause_s()):
                return failed(locator.gave_up(call, routes.last_why))
        elif pending and call.remaining() <= 0:
            return failed(locator.gave_up(call, routes.last_why))
    return None


async def _send(
    api: ApiParts,
    call: Call,
    ask: Ask,
    tps: Sequence[TopicPartition],
    reads: Reads,
    bound: int,
    first: dict[Ask, Response | Unreachable],
) -> Asked:
    """Ask the node `ask` names for `tps`: their active as the read asks, or a stand-in with
    the internal lag `bound`; at most `active_timeout_s` either way."""
    if ask in first:
        return first.pop(ask)
    method, target, body = reads.request(tps)
    if ask.as_stand_in:
        target = fallback_target(target, bound)
    return await api.locator.ask(ask.url, method, target, body, call, api.settings.active_timeout_s)


def _stand_in_here(
    routes: PartitionRoutes,
    reads: Reads,
    tps: Sequence[TopicPartition],
    answer: Response | Failure,
) -> Answer | None:
    """`tps` read from this node's replicas for an active past the hop limit, if it has one
    for each; else the active's answer."""
    replicas = [routes.stand_in(tp) for tp in tps]
    if None in replicas:
        return failed(answer) if isinstance(answer, Failure) else (answer, Outcome.FORWARDED)
    for tp, replica in zip(tps, replicas, strict=True):
        assert replica is not None
        done = reads.local(tp, replica)
        if done is not None:
            return done
    return None


class _OneRead:
    """A single-partition GET: the replica's read, or the asked node's answer as it is."""

    __slots__ = ("_read", "_target")

    def __init__(self, read: Callable[[LocalReplica], Answer], target: str) -> None:
        self._read = read
        self._target = target

    def local(self, tp: TopicPartition, replica: LocalReplica) -> Answer:
        return self._read(replica)

    def request(self, tps: Sequence[TopicPartition]) -> tuple[str, str, bytes | None]:
        return "GET", self._target, None

    def take(self, url: str, tps: Sequence[TopicPartition], answer: Response) -> Answer:
        return answer, Outcome.FORWARDED


async def read_one(
    api: ApiParts,
    tp: TopicPartition,
    call: Call,
    read: Callable[[LocalReplica], Answer],
    found: str | Failure | None = None,
    asked: Response | Unreachable | None = None,
) -> Answer:
    """A single-partition GET (a key, the windows of a key): `read` a replica, or the
    answer of the node asked, as it is. `asked`: what the active `found` names answered
    when the caller asked it already."""
    first = {Ask(found, False): asked} if isinstance(found, str) and asked is not None else None
    done = await read_partitions(api, call, (tp,), _OneRead(read, call.target), first)
    assert done is not None, "a single-partition read ends with its answer"
    return done
