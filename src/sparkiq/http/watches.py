"""Watches of keys: `GET /v1/tables/{table}/keys/{key}/watch`, answered as an event stream.

`Watches.answer` checks what a read checks (the table, the caller's right to read it, the
key, the lag bounds), then the node's watch limit (`max_watchers`: 503 past it) and the
`Last-Event-ID` a resumed watch carries, and answers either an error now or the stream of a
`sparkiq.http.keywatch.KeyWatcher`. A watch relayed from another node as a stand-in
(`fallback_lag`) is answered 503 at once when this node's replica cannot stand in, as a
read would be.
"""

from __future__ import annotations

import time

import orjson

from sparkiq.auth import Identity
from sparkiq.core.queries import Failure
from sparkiq.http.errorcodes import ErrorCode
from sparkiq.http.guard import FORWARD_HEADERS, forbidden
from sparkiq.http.interface import Stream
from sparkiq.http.keywatch import KeyWatcher, WatchedKey, parse_event_id
from sparkiq.http.params import codecs, decode_segment, no_fixed_placement, parse_key_text
from sparkiq.http.parts import ApiParts, Headers
from sparkiq.http.responses import (
    JSON_HEADERS,
    Outcome,
    Response,
    error_response,
    failure_response,
)
from sparkiq.http.settings import FALLBACK_PARAM
from sparkiq.http.sse import SSE_HEADERS
from sparkiq.http.upstream import Upstream

WATCH_PARAMS = frozenset(("max_lag", FALLBACK_PARAM))
LAST_EVENT_ID = "last-event-id"


class Watches:
    """Opens the watches of one node's API."""

    def __init__(self, api: ApiParts, upstream: Upstream) -> None:
        self._api = api
        self._upstream = upstream

    def answer(
        self, path: str, query: str, headers: Headers, identity: Identity
    ) -> Response | Stream:
        """A watch's answer: its stream, or why not (counted as endpoint `watch`)."""
        started = time.perf_counter()
        answer = self._open(path, query, headers, identity)
        if isinstance(answer, Stream):
            status, outcome = answer.status, Outcome.LOCAL
        else:
            status, outcome = answer.status, Outcome.ERROR
        self._api.metrics.observe("watch", outcome, status, time.perf_counter() - started)
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
            return error_response(
                503,
                ErrorCode.TOO_MANY_WATCHES,
                f"{api.view.url} has {settings.max_watchers} watches open (--max-watchers); "
                "retry later or on another node",
                (*JSON_HEADERS, ("retry-after", str(settings.retry_after_s))),
            )
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
