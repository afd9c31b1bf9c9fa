"""Watches: `GET /v1/tables/{table}/keys/{key}/watch` (one key) and
`GET /v1/tables/{table}/changes` (a range of keys), answered as event streams.

`Watches.answer` checks what a read checks (the table, the caller's right to read it, the
key or the range's bounds, the lag bounds), then the node's watch limit (`max_watchers`: 503
past it, watches of keys and of ranges together) and the `Last-Event-ID` a resumed watch
carries, and answers either an error now or the stream of a
`sparkiq.http.watches.keywatch.KeyWatcher` or a
`sparkiq.http.watches.rangewatch.RangeWatcher`. A watch relayed from another node as a
stand-in (`fallback_lag`) is answered 503 at once when this node's replicas cannot stand in,
as a read would be; only another node may ask a watch of a range for some partitions
(`partitions=`).
"""

from __future__ import annotations

import time

import orjson

from sparkiq.auth import Identity
from sparkiq.core import positions
from sparkiq.core.queries import Failure, FailureReason
from sparkiq.core.tables import TableDef
from sparkiq.http.forwarding.relay import Upstream
from sparkiq.http.messages.errorcodes import ErrorCode
from sparkiq.http.messages.params import (
    Params,
    codecs,
    decode_segment,
    no_fixed_placement,
    parse_key_text,
    partition_list,
)
from sparkiq.http.messages.responses import (
    JSON_HEADERS,
    Outcome,
    Response,
    error_response,
    failure_response,
    forbidden,
)
from sparkiq.http.messages.sse import SSE_HEADERS
from sparkiq.http.messages.wire import FORWARD_HEADERS
from sparkiq.http.reads.apiparts import ApiParts, Headers
from sparkiq.http.reads.locate import Call
from sparkiq.http.reads.ranges import range_bounds
from sparkiq.http.reads.windows import per_window
from sparkiq.http.seam import Stream
from sparkiq.http.settings import FALLBACK_PARAM
from sparkiq.http.watches.keywatch import KeyWatcher, WatchedKey, parse_event_id
from sparkiq.http.watches.rangefeed import WatchedRange
from sparkiq.http.watches.rangewatch import RangeWatcher

WATCH_PARAMS = frozenset(("max_lag", FALLBACK_PARAM))
# A relay repeats the bounds and max_lag; it adds partitions (and fallback_lag to a stand-in).
_RELAYED = ("from", "to", "prefix", "max_lag")
CHANGES_PARAMS = frozenset((*_RELAYED, "partitions", FALLBACK_PARAM))
LAST_EVENT_ID = "last-event-id"


class Watches:
    """Opens the watches of one node's API."""

    def __init__(self, api: ApiParts, upstream: Upstream) -> None:
        self._api = api
        self._upstream = upstream

    def answer(
        self, path: str, query: str, headers: Headers, identity: Identity
    ) -> Response | Stream:
        """A watch's answer: its stream, or why not (counted as endpoint `watch`, or
        `changes` for a range)."""
        started = time.perf_counter()
        if is_changes_path(path):
            endpoint = "changes"
            answer = self._open_changes(path, query, headers, identity)
        else:
            endpoint = "watch"
            answer = self._open(path, query, headers, identity)
        if isinstance(answer, Stream):
            status, outcome = answer.status, Outcome.LOCAL
        else:
            status, outcome = answer.status, Outcome.ERROR
        self._api.metrics.observe(endpoint, outcome, status, time.perf_counter() - started)
        return answer

    def _open(
        self, path: str, query: str, headers: Headers, identity: Identity
    ) -> Response | Stream:
        api = self._api
        settings = api.settings
        parts = path.split("/")  # "", v1, tables, <table>, keys, <key>, watch
        if len(parts) != 7 or parts[4] != "keys" or not parts[5]:
            return error_response(
                404,
                ErrorCode.NO_ROUTE,
                f"no endpoint at {path}; a watch is at /v1/tables/{{table}}/keys/{{key}}/watch",
            )
        name = decode_segment(parts[3])
        if isinstance(name, Failure):
            return failure_response(name)
        if not identity.may_read(name):
            return forbidden(identity, name)
        request = api.table_request(name, parts[5], path, query, headers, WATCH_PARAMS)
        if isinstance(request, Failure):
            return failure_response(request)
        table, key_text, _, call = request
        if table.is_windowed:
            return failure_response(per_window(table, "a watch of a key", key_text))
        wire = parse_key_text(table, key_text, settings.max_key_bytes)
        if isinstance(wire, Failure):
            return failure_response(wire)
        partition = table.partition_of(wire)
        if partition is None:
            return failure_response(no_fixed_placement(table, "a watch"))
        seen: int | None = None
        last_event_id = headers.get(LAST_EVENT_ID)
        if last_event_id is not None:
            parsed = parse_event_id(last_event_id, partition)
            if isinstance(parsed, Failure):
                return failure_response(parsed)
            seen = parsed
        if api.metrics.watches_open >= settings.max_watchers:
            return self._too_many()
        if call.fallback_lag is not None:
            local = api.locator.local_only((table.topic, partition), call.fallback_lag)
            if isinstance(local, Failure):
                return failure_response(local)
        key_codec, _ = codecs(table)
        key = WatchedKey(
            table,
            partition,
            orjson.dumps(key_codec.render(wire)),
            key_codec.wire_to_store(wire),
            path,
        )
        watcher = KeyWatcher(api, self._upstream, key, call, seen, FORWARD_HEADERS.get())
        return Stream(200, SSE_HEADERS, watcher.chunks())

    def _too_many(self) -> Response:
        settings = self._api.settings
        return error_response(
            503,
            ErrorCode.TOO_MANY_WATCHES,
            f"{self._api.view.url} has {settings.max_watchers} watches open (--max-watchers); "
            "retry later or on another node",
            (*JSON_HEADERS, ("retry-after", str(settings.retry_after_s))),
        )

    def _open_changes(
        self, path: str, query: str, headers: Headers, identity: Identity
    ) -> Response | Stream:
        api = self._api
        name = decode_segment(path.split("/")[3])  # "", v1, tables, <table>, changes
        if isinstance(name, Failure):
            return failure_response(name)
        if not identity.may_read(name):
            return forbidden(identity, name)
        request = api.table_request(name, "", path, query, headers, CHANGES_PARAMS)
        if isinstance(request, Failure):
            return failure_response(request)
        table, _, params, call = request
        watched = _watched_range(api, table, params, call, path)
        if isinstance(watched, Failure):
            return failure_response(watched)
        seen: dict[int, int] = {}
        last_event_id = headers.get(LAST_EVENT_ID)
        if last_event_id is not None:
            try:
                seen = positions.decode(last_event_id.strip(), table.partitions)
            except positions.BadPositions as exc:
                return failure_response(
                    Failure(
                        FailureReason.BAD_REQUEST,
                        f"Last-Event-ID {last_event_id[:64]!r} is not an event id of a watch "
                        f"of changes (<partition>-<position> joined by '.'): {exc}",
                    )
                )
        if api.metrics.watches_open >= api.settings.max_watchers:
            return self._too_many()
        if call.fallback_lag is not None:
            for p in watched.partitions:
                local = api.locator.local_only((table.topic, p), call.fallback_lag)
                if isinstance(local, Failure):
                    return failure_response(local)
        watcher = RangeWatcher(api, self._upstream, watched, call, seen, FORWARD_HEADERS.get())
        return Stream(200, SSE_HEADERS, watcher.chunks())


def is_changes_path(path: str) -> bool:
    """Whether `path` (raw) is that of a watch of a range, `/v1/tables/{table}/changes`."""
    return path.endswith("/changes") and path.count("/") == 4 and path.startswith("/v1/tables/")


def _watched_range(
    api: ApiParts, table: TableDef, params: Params, call: Call, path: str
) -> WatchedRange | Failure:
    """The keys and partitions a watch of changes asks for (`partitions` only from another
    node, as a range page's)."""
    bounds = range_bounds(api, table, params)
    if isinstance(bounds, Failure):
        return bounds
    lo, hi, prefix, _ = bounds
    partitions = list(range(table.partitions))
    if "partitions" in params:
        if call.hops == 0:
            return Failure(
                FailureReason.BAD_REQUEST,
                "partitions is internal to sparkiq nodes; watch the whole table instead",
            )
        asked = partition_list(params["partitions"], table.partitions)
        if isinstance(asked, Failure):
            return asked
        partitions = asked
    relayed = {k: params[k] for k in _RELAYED if k in params}
    return WatchedRange(table, tuple(partitions), lo, hi, prefix, path, relayed)
