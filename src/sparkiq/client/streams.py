"""The client's event streams (`Client.watch`, `Client.changes`): read as long as the caller
iterates, resumed with `Last-Event-ID` when they end or break.

A stream is asked of the first node a plan names; one that ends (its last event says why:
`unavailable`, `dropped`), breaks, or sends nothing for the read timeout (its heartbeats
stopped) is asked again of the next node, with the id of the last event received (a key's
`<partition>-<position>`, a range's vector of them: the nodes resume either exactly), so no
change is missed and none comes twice. Only an answer that is no stream and that asking
again cannot change (400, 401, 403, 404: not one of the client's retryable statuses) ends
the iteration, with `ClientError`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any

import httpx
import orjson

from sparkiq.client.unreached import NOT_ACCEPTED, nodes_unreachable, why_not_accepted
from sparkiq.core.errors import ClientError
from sparkiq.http.messages.sse import EventReader

_PAUSE_S = 0.5  # between two rounds of the plan


def follow(
    http: httpx.Client,
    plan: Callable[[], Iterable[tuple[str, bool]]],
    path: str,
    params: dict[str, str],
    timeout: httpx.Timeout,
    retryable: Collection[int],
    error_of: Callable[[httpx.Response], tuple[str, str]],
    between_rounds: Callable[[], None],
    wait_for_unreachable: bool = True,
) -> Iterator[dict[str, Any]]:
    """The JSON of each change event of `GET path?params`, asked of each node `plan()`
    names in turn (its URLs, with whether it is a standby: all are asked alike), round after
    round (`between_rounds()` after each: refresh the map). An answer of a status not in
    `retryable` raises `ClientError` with its code and message (`error_of`). Unless
    `wait_for_unreachable`, a first round in which no node accepts a connection raises
    `NodesUnreachable`."""
    last: str | None = None
    unreached: dict[str, str] | None = {}  # None once a node accepted a connection
    while True:
        for url, _ in plan():
            headers = {} if last is None else {"last-event-id": last}
            try:
                with http.stream(
                    "GET", url + path, params=params, headers=headers, timeout=timeout
                ) as r:
                    unreached = None
                    if r.status_code != 200:
                        r.read()
                        if r.status_code not in retryable:
                            code, message = error_of(r)
                            raise ClientError(f"{r.status_code} {code}: {message}")
                        continue
                    reader = EventReader()
                    for chunk in r.iter_bytes():
                        for event in reader.feed(chunk):
                            # Every event's id is where to resume (a range's first event,
                            # `positions`, and the last, why it ended, too).
                            last = event.event_id or last
                            if event.name == "message":
                                yield orjson.loads(event.data)
            except NOT_ACCEPTED as exc:
                if unreached is not None:
                    unreached[url] = why_not_accepted(exc)
                continue
            except httpx.HTTPError:
                continue
        if not wait_for_unreachable and unreached:
            raise nodes_unreachable(unreached)
        between_rounds()
        time.sleep(_PAUSE_S)
