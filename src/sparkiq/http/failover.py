"""Single-partition reads that survive a failed active: the locate/ask/stand-in loop.

`answer_single` is how every single-partition read (a key, the windows of a key) is answered
when this node's own active replica cannot do it at once:

1. the active is another node: ask it, waiting at most `active_timeout_s` of the budget;
   its answer (anything but a 503) is passed through as it is, except that a 508 (the nodes
   disagree on the owner while a rebalance spreads) is answered by a local stand-in if any;
2. the active cannot answer -- refused, broken or slow connection, a 503 (restoring), no
   active in the map, or this node's own active replica still restoring: a replica within the
   call's lag bound answers instead (`max_lag=N` if the request gave one, else
   `standby_max_lag`): this node's own standby or restoring replica first, then each other
   standby, asked with the internal `fallback_lag` parameter (answer from your replica or 503
   at once, never forward);
3. nobody could: pause (a moment for an unreachable node, a change of the view otherwise)
   and start again, until the budget is spent (503 + Retry-After). A node that has no map
   yet (starting up) answers 503 at once instead, so the caller asks another node.

Answers from a stand-in say `"standby": true` and the changelog offset their replica had
reached, like every read.
"""

from __future__ import annotations

from collections.abc import Callable

from sparkiq.core.queries import Failure
from sparkiq.core.topology import TopicPartition
from sparkiq.http.forward import Unreachable
from sparkiq.http.locate import RECHECK_S, Call, LocalReplica, fallback_target
from sparkiq.http.parts import ApiParts
from sparkiq.http.responses import Answer, Outcome, Response, failed

Read = Callable[[LocalReplica], Answer]


async def answer_single(
    api: ApiParts,
    tp: TopicPartition,
    call: Call,
    read: Read,
    found: LocalReplica | str | Failure | None = None,
    asked: Response | Unreachable | None = None,
) -> Answer:
    """Answer a read of `tp`; `found` is what `locator.resolve` just said, if asked already,
    and `asked` what the active `found` names answered when it was asked once already."""
    if call.fallback_lag is not None:
        return answer_as_stand_in(api, tp, call.fallback_lag, read)
    locator = api.locator
    settings = api.settings
    while True:
        if found is None:
            found = locator.resolve(tp, call.max_lag)
        pause = RECHECK_S
        if isinstance(found, LocalReplica):
            return read(found)
        if isinstance(found, str):
            answer: Response | Failure | Unreachable
            if asked is not None:  # the caller asked the active already
                answer, asked = asked, None
            else:
                answer = await locator.ask(
                    found, "GET", call.target, None, call, settings.active_timeout_s
                )
            if isinstance(answer, Failure) or (
                isinstance(answer, Response) and answer.status == 508
            ):
                # Past the hop limit: the nodes disagree on the owner while a rebalance
                # spreads. A replica of this node may answer; else the 508 goes back.
                local = locator.stand_in(tp, call.stand_in_bound(settings))
                if local is not None:
                    return read(local)
                return (
                    failed(answer) if isinstance(answer, Failure) else (answer, Outcome.FORWARDED)
                )
            if isinstance(answer, Response) and answer.status != 503:
                return answer, Outcome.FORWARDED
            if isinstance(answer, Unreachable):
                api.metrics.forward_failed(answer)
                why = f"active {found} is unreachable ({answer.message})"
                pause = settings.reconnect_pause_s
            else:
                why = f"active {found} answered {answer.status}"
        else:
            why = found.message
        stand_in = await _ask_stand_ins(api, tp, call, read)
        if stand_in is not None:
            return stand_in
        if isinstance(found, Failure) and not api.view.is_ready() and not _anyone_holds(api, tp):
            # This node has no map yet (starting up): answer now, so the caller asks another.
            return failed(locator.gave_up(call, why))
        if not await locator.wait(call, pause):
            return failed(locator.gave_up(call, why))
        found = None


def _anyone_holds(api: ApiParts, tp: TopicPartition) -> bool:
    placement = api.view.placement(tp)
    return placement.active is not None or bool(placement.standbys)


async def _ask_stand_ins(
    api: ApiParts, tp: TopicPartition, call: Call, read: Read
) -> Answer | None:
    """A replica within the call's bound answers for the active: local first, then others."""
    bound = call.stand_in_bound(api.settings)
    local = api.locator.stand_in(tp, bound)
    if local is not None:
        return read(local)
    target = fallback_target(call.target, bound)
    for url in api.locator.standby_urls(tp):
        if call.remaining() <= 0:
            return None
        answer = await api.locator.ask(
            url, "GET", target, None, call, api.settings.active_timeout_s
        )
        if isinstance(answer, Response) and answer.status not in (503, 508):
            return answer, Outcome.FORWARDED
        if isinstance(answer, Unreachable):
            api.metrics.forward_failed(answer)
    return None


def answer_as_stand_in(api: ApiParts, tp: TopicPartition, bound: int, read: Read) -> Answer:
    """Asked by another node in place of a failed active: this node's replica or 503 now."""
    found = api.locator.local_only(tp, bound)
    return failed(found) if isinstance(found, Failure) else read(found)
