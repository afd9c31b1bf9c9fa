"""Read-your-writes from a source topic: `after_source=TOPIC:PARTITION:OFFSET[,...]`.

A service that produced a record to a pipeline's source topic (and got its offset back)
reads with `after_source`: the node waits, within the request's budget, until the table's
pipeline has committed a micro-batch past that record (the progress topic says so, see
`sparkiq.core.progress`), then reads as with `after=` the changelog positions that batch
was written up to. A pipeline that has not got that far in time is a 503 with Retry-After.
"""

from __future__ import annotations

import asyncio

from sparkiq.core.positions import merge
from sparkiq.core.progress import BadProgress, SourcePosition, parse_source_positions
from sparkiq.core.queries import Failure, FailureReason
from sparkiq.http.nodeview import NodeView
from sparkiq.http.reads.locate import Call
from sparkiq.http.settings import HttpSettings

# How often a read waiting for its source position looks at the progress again.
SOURCE_RECHECK_S = 0.01


def parse(text: str) -> list[SourcePosition] | Failure:
    """The source positions of an `after_source=` parameter."""
    try:
        return parse_source_positions(text)
    except BadProgress as exc:
        return Failure(
            FailureReason.BAD_REQUEST,
            f"after_source={text[:80]!r}: {exc} (the offsets Kafka gave the records produced)",
        )


async def reach(view: NodeView, settings: HttpSettings, call: Call) -> Failure | None:
    """Wait until the table's pipeline has committed past `call.after_source`, then add
    the changelog positions that reflect it to `call.after`; a 503 when the budget runs out.

    The read loop calls it before the first round, once the request is known to be valid.
    """
    if call.after_source is None:
        return None
    table, wanted = call.after_source
    progress = view.pipeline_progress()
    while True:
        need = progress.covering(table, wanted)
        if need is not None:
            call.after = merge(dict(call.after or {}), need)
            call.after_source = None
            return None
        remaining = call.remaining()
        if remaining <= 0:
            return _not_yet(view, settings, table, wanted, call)
        await asyncio.sleep(min(SOURCE_RECHECK_S, remaining))


def _not_yet(
    view: NodeView,
    settings: HttpSettings,
    table: str,
    wanted: list[SourcePosition],
    call: Call,
) -> Failure:
    latest = view.pipeline_progress().latest(table)
    if latest is None:
        why = (
            f"no progress of table {table!r}'s pipeline has reached {view.url} "
            "(after_source needs a table written by `sparkiq run`)"
        )
    else:
        reached = ", ".join(
            f"{topic}:{p}:{latest.sources.get((topic, p), 'unread')}" for topic, p, _ in wanted
        )
        why = (
            f"table {table!r}'s pipeline has not committed past "
            f"{', '.join(f'{t}:{p}:{o}' for t, p, o in wanted)} within {call.budget_s:g}s "
            f"(its last batch, {latest.batch}, read up to {reached})"
        )
    return Failure(FailureReason.UNAVAILABLE, why, retry_after_s=float(settings.retry_after_s))
