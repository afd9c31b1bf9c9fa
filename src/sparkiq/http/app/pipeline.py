"""`GET /v1/pipeline`: how the pipeline's streaming queries run, as this node heard it.

`sparkiq run` publishes the figures of every micro-batch of every query (`QueryBatch`, the
topic ``<app>.queries``: `sparkiq.kafka.progress`) and every node follows them into its
`PipelineProgress`. This answers, per query, its latest batch and its batches since
`since_ms` (default: the last ten minutes), which the console's pipeline page charts; a page
that polls passes the time of the last batch it has, and gets only the newer ones.

Authorization: a query is listed to a caller that may read every table it writes; a query
that writes no table (a branch to topics) only to a caller that may read every table.
"""

from __future__ import annotations

import time

from sparkiq.auth import Identity
from sparkiq.core.progress import QueryBatch
from sparkiq.core.queries import Failure
from sparkiq.http.messages.params import int_param, parse_query
from sparkiq.http.messages.responses import Response, failure_response, json_response
from sparkiq.http.nodeview import NodeView

SINCE_PARAM = "since_ms"
PARAMS = frozenset((SINCE_PARAM,))
_LONG_MAX = 2**63 - 1
# The history an answer carries when the caller names no `since_ms`.
DEFAULT_HISTORY_MS = 10 * 60 * 1000


def answer(view: NodeView, identity: Identity, query: str) -> Response:
    """The answer to `GET /v1/pipeline?{query}` for `identity`."""
    params = parse_query(query, PARAMS)
    if isinstance(params, Failure):
        return failure_response(params)
    now_ms = int(time.time() * 1000)
    since = int_param(params, SINCE_PARAM, now_ms - DEFAULT_HISTORY_MS, 0, _LONG_MAX)
    if isinstance(since, Failure):
        return failure_response(since)
    assert since is not None  # it has a default
    queries = []
    for name, batches in view.pipeline_progress().queries().items():
        latest = batches[-1]
        if not may_see(identity, latest.tables):
            continue
        queries.append(
            {
                "name": name,
                "tables": list(latest.tables),
                "latest": figures(latest),
                "history": [figures(b) for b in batches if b.time_ms > since],
            }
        )
    return json_response({"node": view.url, "time_ms": now_ms, "queries": queries})


def may_see(identity: Identity, tables: tuple[str, ...]) -> bool:
    """Whether `identity` may see a query that writes `tables` (see the module docstring)."""
    if identity.tables is None:
        return True
    return bool(tables) and all(identity.may_read(t) for t in tables)


def figures(batch: QueryBatch) -> dict[str, object]:
    """One batch as the answer gives it."""
    return {
        "batch": batch.batch,
        "time_ms": batch.time_ms,
        "input_rows": batch.input_rows,
        "input_rows_per_s": batch.input_rows_per_s,
        "processed_rows_per_s": batch.processed_rows_per_s,
        "batch_ms": batch.batch_ms,
        "state_rows": batch.state_rows,
        "dead_letters": batch.dead_letters,
        "dead_letters_total": batch.dead_letters_total,
        "trigger": batch.trigger.value,
        "between_epochs_ms": batch.between_epochs_ms,
    }
