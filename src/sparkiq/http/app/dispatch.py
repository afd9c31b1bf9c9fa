"""The HTTP API v1 of a serving node, independent of the server interface.

`HttpApi.handle(method, path, query, headers, body)` takes a request as plain values (the raw,
still percent-encoded path) and returns a `Response`; the loop server (`loopserver`) and the
ASGI adapter only move bytes. This module parses and dispatches, and answers the
single-partition endpoints (key, windows, owner) and the node's own ones (tables, health,
metrics; `metadata` and `pipeline` answer theirs); `multiget`, `elsewhere` and `ranges`
answer those that span partitions (multi-get; range and windows of many keys). The server
and the adapter try `keypath` (the hot path for single-key GETs, `HttpApi.keys`) before
`handle`; both read keys with `keypath.read_key` and go through the read loop
(`readloop.read_one`) for what is not local.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from functools import partial

from sparkiq.auth import EVERYONE, AuthConfig, Identity
from sparkiq.core.errors import FormatError, StorageFault
from sparkiq.core.queries import Failure, FailureReason
from sparkiq.core.tables import TableDef
from sparkiq.http.app import metadata, pipeline
from sparkiq.http.app.gate import Gate
from sparkiq.http.app.mapexchange import HttpMapExchange, is_map_path
from sparkiq.http.forwarder import Forwarder
from sparkiq.http.forwarding.pool import PoolForwarder
from sparkiq.http.forwarding.relay import Upstream
from sparkiq.http.messages.errorcodes import ErrorCode
from sparkiq.http.messages.openapi import rendered
from sparkiq.http.messages.params import (
    AFTER_PARAM,
    AFTER_SOURCE_PARAM,
    Params,
    codecs,
    decode_segment,
    int_param,
    no_fixed_placement,
    parse_after,
    parse_key_text,
    parse_query,
)
from sparkiq.http.messages.responses import (
    JSON_HEADERS,
    Answer,
    Outcome,
    Response,
    error_response,
    failed,
    failure_response,
    forbidden,
    is_absent,
    json_response,
)
from sparkiq.http.messages.wire import BUDGET_HEADER, HOPS_HEADER
from sparkiq.http.metrics import METRICS_CONTENT_TYPE, HttpMetrics
from sparkiq.http.nodeview import NodeView
from sparkiq.http.reads import aftersource, elsewhere, multiget, ranges, readloop, windows
from sparkiq.http.reads.apiparts import Headers, TableRequest
from sparkiq.http.reads.keypath import KeyPath
from sparkiq.http.reads.keyread import read_key
from sparkiq.http.reads.locate import Call, Locator, new_call
from sparkiq.http.settings import FALLBACK_PARAM, HttpSettings
from sparkiq.http.watches.endpoints import Watches

log = logging.getLogger(__name__)

_OK = Response(200, b'{"status":"ok"}')


Handler = Callable[[TableDef, str, Params, Call, bytes], Awaitable[Answer]]


@dataclass(frozen=True, slots=True)
class _Endpoint:
    """One per-table endpoint: its metrics name, method, query parameters and handler."""

    name: str
    method: str
    params: frozenset[str]
    handler: Handler


class HttpApi:
    """Answers HTTP API v1 requests for one node, from its view."""

    def __init__(
        self,
        view: NodeView,
        settings: HttpSettings | None = None,
        *,
        forwarder: Forwarder | None = None,
        metrics: HttpMetrics | None = None,
        auth: AuthConfig | None = None,
        client_ssl: ssl.SSLContext | None = None,
    ) -> None:
        self.view = view
        self.settings = settings or HttpSettings()
        auth = auth or AuthConfig.none()
        self.forwarder = forwarder or PoolForwarder(
            self.settings.pool_per_host,
            pipeline_depth=self.settings.forward_pipeline_depth,
            cluster=auth.cluster,
            ssl_context=client_ssl,
        )
        self.metrics = metrics or HttpMetrics()
        # Admits each request (id, load, caller, cluster headers) before it is answered.
        self.gate = Gate(auth, self.settings, self.metrics)
        self.locator = Locator(view, self.settings, self.forwarder)
        lag = ("max_lag", FALLBACK_PARAM, AFTER_PARAM, AFTER_SOURCE_PARAM)
        self._key_endpoint = _Endpoint("key", "GET", frozenset((*lag, "partitions")), self._get_key)
        self._table_endpoints = {
            "range": _Endpoint("range", "GET", ranges.RANGE_PARAMS, self._range),
            "windows": _Endpoint(
                "window_range", "GET", ranges.WINDOW_RANGE_PARAMS, self._window_range
            ),
            "multi-get": _Endpoint(
                "multi_get", "POST", frozenset((*lag, "partitions")), self._multi_get
            ),
        }
        self._key_endpoints = {
            "windows": _Endpoint(
                "windows", "GET", frozenset((*windows.PARAMS, *lag)), self._windows
            ),
            "owner": _Endpoint("owner", "GET", frozenset(), self._owner),
        }
        # The hot path for GET .../keys/{key}; the adapters try it before `handle`.
        self.keys = KeyPath(self)
        self.watches = Watches(self, Upstream(auth.cluster, client_ssl))
        # The cluster map this node serves as group leader and fetches as a member (the node
        # is given it as its map exchange: `sparkiq.core.mapref`).
        self.maps = HttpMapExchange(self.forwarder, view.url)

    async def close(self) -> None:
        """Close the pooled connections to other nodes."""
        await self.forwarder.close()

    # -- entry -------------------------------------------------------------------------------

    async def handle(
        self,
        method: str,
        path: str,
        query: str,
        headers: Headers,
        body: bytes,
        identity: Identity = EVERYONE,
    ) -> Response:
        """Answer one request. `path` is raw (percent-encoded); `query` has no leading '?'.

        `identity` is the caller the gate admitted (`HttpApi.gate`); it decides which
        tables the request may read.
        """
        started = time.perf_counter()
        endpoint = "unknown"
        try:
            endpoint, response, outcome = await self._dispatch(
                method, path, query, headers, body, identity
            )
        except Exception as exc:
            endpoint = self._read_endpoint(path) or endpoint
            if not self.read_raised(method, path, exc):
                response, outcome = self.error_answer(method, path, exc)
            else:
                # The failed replica is marked (a StorageFault) or the error was passing: the
                # request is answered again, and goes where the view now says.
                try:
                    endpoint, response, outcome = await self._dispatch(
                        method, path, query, headers, body, identity
                    )
                except Exception as again:
                    response, outcome = self.error_answer(method, path, again)
        self.metrics.observe(endpoint, outcome, response.status, time.perf_counter() - started)
        return response

    def read_raised(self, method: str, path: str, exc: Exception) -> bool:
        """Whether a read of a table that raised `exc` is to be answered once more: counted
        and logged here. Not for a value that does not decode (the producer's data: the
        same again) nor outside the table endpoints."""
        endpoint = self._read_endpoint(path)
        if isinstance(exc, FormatError) or endpoint is None:
            return False
        if isinstance(exc, StorageFault):
            self.metrics.read_failed(endpoint, "storage")
            log.warning(
                "a read of %s %s hit a storage fault (%s); answering again", method, path, exc
            )
        else:
            self.metrics.read_failed(endpoint, "unexpected")
            log.error("unexpected error reading %s %s; answering again", method, path, exc_info=exc)
        return True

    def error_answer(self, method: str, path: str, exc: Exception) -> Answer:
        """The answer to an exception that escaped answering `method path` (logged here).

        A read of a table never answers 500 for its node's own state: a storage fault, or an
        error that repeats when the read is answered again, is a 503 with Retry-After (the
        caller, or its client, asks another replica).
        """
        if isinstance(exc, FormatError):
            # A stored value that does not decode: the producer's data, not the caller's input.
            log.warning("cannot render an answer to %s %s: %s", method, path, exc)
            return error_response(500, ErrorCode.UNDECODABLE_VALUE, str(exc)), Outcome.ERROR
        if self._read_endpoint(path) is not None:
            if not isinstance(exc, StorageFault):
                log.error("unexpected error answering %s %s", method, path, exc_info=exc)
            failure = Failure(
                FailureReason.UNAVAILABLE,
                f"{self.view.url} could not read its replica ({type(exc).__name__}); "
                "retry, or ask another node",
                retry_after_s=float(self.settings.retry_after_s),
            )
            return failure_response(failure), Outcome.ERROR
        # A bug, not bad input: bad input is answered as a Failure before it gets here.
        log.error("unexpected error answering %s %s", method, path, exc_info=exc)
        response = error_response(
            500, ErrorCode.INTERNAL, "internal error; the node logged the details"
        )
        return response, Outcome.ERROR

    def body_too_large(self) -> Response:
        """The answer to a body the adapter stopped reading at `max_body_bytes`."""
        limit = self.settings.max_body_bytes
        failure = Failure(FailureReason.TOO_LARGE, f"request body is over {limit} bytes")
        response = failure_response(failure)
        self.metrics.observe("body", Outcome.ERROR, response.status, 0.0)
        return response

    async def _dispatch(
        self, method: str, path: str, query: str, headers: Headers, body: bytes, identity: Identity
    ) -> tuple[str, Response, Outcome]:
        parts = path.split("/")
        n = len(parts)
        if n >= 4 and parts[1] == "v1" and parts[2] == "tables":
            table_name = decode_segment(parts[3])
            if isinstance(table_name, Failure):
                return ("tables", *failed(table_name))
            endpoint, key_segment = self._table_endpoint(parts)
            if endpoint is not None:
                if not identity.may_read(table_name):
                    return (endpoint.name, forbidden(identity, table_name), Outcome.ERROR)
                answer = await self._on_table(
                    endpoint, method, table_name, key_segment, path, query, headers, body
                )
                return (endpoint.name, *answer)
        elif path == "/v1/tables":
            return ("tables", *self._simple(method, lambda: self._tables(identity)))
        elif path == "/v1/metadata":
            return ("metadata", *await self._metadata(method, query, headers))
        elif is_map_path(path):
            return ("cluster_map", self.maps.answer(method, path), Outcome.LOCAL)
        elif path == "/v1/pipeline":
            reply = partial(pipeline.answer, self.view, identity, query)
            return ("pipeline", *self._simple(method, reply))
        elif path == "/v1/openapi.json":
            return ("openapi", *self._simple(method, lambda: rendered(self.settings)))
        elif path == "/healthz":
            return ("healthz", *self._simple(method, lambda: _OK))
        elif path == "/readyz":
            return ("readyz", *self._simple(method, self._readyz))
        elif path == "/metrics":
            return ("metrics", *self._simple(method, self._metrics))
        return (
            "unknown",
            error_response(404, ErrorCode.NO_ROUTE, f"no endpoint at {path}; see GET /v1/tables"),
            Outcome.ERROR,
        )

    def _table_endpoint(self, parts: list[str]) -> tuple[_Endpoint | None, str]:
        """The per-table endpoint of a path split at "/" (v1, tables, table checked by the
        caller), and its raw key segment ("" for table-wide endpoints)."""
        n = len(parts)
        if n == 6 and parts[4] == "keys":
            return self._key_endpoint, parts[5]
        if n == 5:
            return self._table_endpoints.get(parts[4]), ""
        if n == 7 and parts[4] == "keys":
            return self._key_endpoints.get(parts[6]), parts[5]
        return None, ""

    def _read_endpoint(self, path: str) -> str | None:
        """The metrics name of the table read `path` asks for, None if it asks for none."""
        parts = path.split("/")
        if len(parts) < 4 or parts[1] != "v1" or parts[2] != "tables":
            return None
        endpoint = self._table_endpoint(parts)[0]
        return None if endpoint is None else endpoint.name

    def _simple(self, method: str, answer: Callable[[], Response]) -> Answer:
        if method != "GET":
            return _wrong_method(method, "GET"), Outcome.ERROR
        return answer(), Outcome.LOCAL

    async def _on_table(
        self,
        endpoint: _Endpoint,
        method: str,
        table_name: str,
        key_segment: str,
        path: str,
        query: str,
        headers: Headers,
        body: bytes,
    ) -> Answer:
        if method != endpoint.method:
            return _wrong_method(method, endpoint.method), Outcome.ERROR
        request = self.table_request(table_name, key_segment, path, query, headers, endpoint.params)
        if isinstance(request, Failure):
            return failed(request)
        table, key_text, params, call = request
        return await endpoint.handler(table, key_text, params, call, body)

    def table_request(
        self,
        table_name: str,
        key_segment: str,
        path: str,
        query: str,
        headers: Headers,
        allowed: Collection[str],
    ) -> TableRequest | Failure:
        """The table, key text, parameters (of `allowed`) and `Call` of a request to one
        table's endpoint, or why it cannot be answered."""
        table = self.view.table(table_name)
        if table is None:
            return self.unknown_table(table_name)
        params = parse_query(query, allowed)
        if isinstance(params, Failure):
            return params
        call = self.call_for(headers, params, f"{path}?{query}" if query else path)
        if isinstance(call, Failure):
            return call
        if AFTER_PARAM in params:
            after = parse_after(params[AFTER_PARAM], table)
            if isinstance(after, Failure):
                return after
            call.after = after
        if AFTER_SOURCE_PARAM in params:
            source = aftersource.parse(params[AFTER_SOURCE_PARAM])
            if isinstance(source, Failure):
                return source
            call.after_source = (table.name, source)
        key_text = decode_segment(key_segment)
        if isinstance(key_text, Failure):
            return key_text
        return table, key_text, params, call

    def call_for(self, headers: Headers, params: Params, target: str) -> Call | Failure:
        """The `Call` of a request: hops and budget from its headers, lag bounds from `params`."""
        call = new_call(self.settings, headers.get(HOPS_HEADER), headers.get(BUDGET_HEADER), target)
        if isinstance(call, Failure) or not params:
            return call
        max_lag = int_param(params, "max_lag", None, 0)
        if isinstance(max_lag, Failure):
            return max_lag
        call.max_lag = max_lag
        if FALLBACK_PARAM in params:
            if call.hops == 0:
                return Failure(
                    FailureReason.BAD_REQUEST,
                    f"{FALLBACK_PARAM} is internal to sparkiq nodes; use max_lag instead",
                )
            fallback_lag = int_param(params, FALLBACK_PARAM, None, 0)
            if isinstance(fallback_lag, Failure):
                return fallback_lag
            call.fallback_lag = fallback_lag
        return call

    def unknown_table(self, name: str) -> Failure:
        """404 for a table this node does not know (503 while it has not read the catalog)."""
        if not self.view.catalog_loaded():
            # A node starting up knows no table yet: another node may well know this one.
            return Failure(
                FailureReason.UNAVAILABLE,
                f"{self.view.url} is starting and has not read the table catalog yet",
                retry_after_s=float(self.settings.retry_after_s),
            )
        known = sorted(t.name for t in self.view.tables())
        listing = ", ".join(known) if known else "none registered yet"
        return Failure(
            FailureReason.UNKNOWN_TABLE,
            f"no table {name!r}; known tables: {listing} (GET /v1/tables lists them)",
        )

    # -- one key -----------------------------------------------------------------------------

    async def _get_key(
        self, table: TableDef, key_text: str, params: Params, call: Call, body: bytes
    ) -> Answer:
        if table.is_windowed:
            return failed(windows.per_window(table, "a key read", key_text))
        wire = parse_key_text(table, key_text, self.settings.max_key_bytes)
        if isinstance(wire, Failure):
            return failed(wire)
        if "partitions" in params:  # another node's probe: these partitions only
            return await elsewhere.probe_key(self, table, key_text, wire, params, call)
        partition = table.partition_of(wire)
        if partition is None:  # placement unknown: every partition is asked
            return await elsewhere.find_key(self, table, key_text, wire, None, call)
        pair = codecs(table)
        store_key = pair[0].wire_to_store(wire)
        node = self.view.url
        answer = await readloop.read_one(
            self,
            (table.topic, partition),
            call,
            lambda replica: read_key(
                table, pair, key_text, wire, store_key, partition, replica, node
            ),
        )
        if is_absent(answer[0]) and elsewhere.looks_everywhere(self, table, call):
            return await elsewhere.find_key(self, table, key_text, wire, partition, call)
        return answer

    # -- windows of one key ------------------------------------------------------------------

    async def _windows(
        self, table: TableDef, key_text: str, params: Params, call: Call, body: bytes
    ) -> Answer:
        settings = self.settings
        query = windows.parse(table, key_text, params, settings.max_key_bytes, settings.max_windows)
        if isinstance(query, Failure):
            return failed(query)
        # All windows of a key live in the partition of the key alone.
        partition = table.partition_of(query.wire)
        if partition is None:
            return failed(no_fixed_placement(table, "windows"))
        node = self.view.url
        return await readloop.read_one(
            self,
            (table.topic, partition),
            call,
            lambda replica: windows.read(table, query, partition, replica, node),
        )

    # -- owner of one key --------------------------------------------------------------------

    async def _owner(
        self, table: TableDef, key_text: str, params: Params, call: Call, body: bytes
    ) -> Answer:
        wire = parse_key_text(table, key_text, self.settings.max_key_bytes)
        if isinstance(wire, Failure):
            return failed(wire)
        partition = table.partition_of(wire)
        if partition is None:
            return failed(no_fixed_placement(table, "owner"))
        placement = self.view.placement((table.topic, partition))
        return json_response(
            {
                "table": table.name,
                "key": codecs(table)[0].render(wire),
                "partition": partition,
                "active": placement.active,
                "standbys": list(placement.standbys),
            }
        ), Outcome.LOCAL

    # -- across partitions -------------------------------------------------------------------

    async def _multi_get(
        self, table: TableDef, key_text: str, params: Params, call: Call, body: bytes
    ) -> Answer:
        return await multiget.multi_get(self, table, params, call, body)

    async def _range(
        self, table: TableDef, key_text: str, params: Params, call: Call, body: bytes
    ) -> Answer:
        return await ranges.range_scan(self, table, params, call)

    async def _window_range(
        self, table: TableDef, key_text: str, params: Params, call: Call, body: bytes
    ) -> Answer:
        return await ranges.window_range(self, table, params, call)

    # -- the node's own endpoints ------------------------------------------------------------

    def _tables(self, identity: Identity) -> Response:
        """The tables `identity` may read (all of them without authentication)."""
        view = self.view
        tables = [view.table_summary(t) for t in view.tables() if identity.may_read(t.name)]
        return json_response({"tables": tables})

    async def _metadata(self, method: str, query: str, headers: Headers) -> Answer:
        if method != "GET":
            return _wrong_method(method, "GET"), Outcome.ERROR
        # A peer is waited for as long as a read waits for an active: the console asks every
        # few seconds, and a slow peer is listed with its error rather than waited out.
        response = await metadata.answer(
            self.view,
            self.forwarder,
            self.settings.active_timeout_s,
            query,
            forwarded=headers.get(HOPS_HEADER) is not None,
        )
        return response, Outcome.LOCAL if response.status == 200 else Outcome.ERROR

    def _readyz(self) -> Response:
        # A ready node stays ready while the brokers are unreachable: it answers what its
        # stores hold (reads that need newer records answer 503), and taking every node out
        # of rotation at once would turn a Kafka outage into a sparkiq outage. The body says
        # so, for people and for load balancers that read it.
        if self.view.is_ready():
            return json_response({"status": "ok", "kafka": self.view.kafka_contact()})
        reason = self.view.unready_reason() or "it has not joined the group or is restoring"
        return error_response(
            503,
            ErrorCode.NOT_READY,
            f"node is not ready: {reason}",
            (*JSON_HEADERS, ("retry-after", str(self.settings.retry_after_s))),
        )

    def _metrics(self) -> Response:
        return Response(200, self.metrics.render(), (("content-type", METRICS_CONTENT_TYPE),))


def _wrong_method(method: str, allowed: str) -> Response:
    return error_response(
        405,
        ErrorCode.METHOD_NOT_ALLOWED,
        f"{method} is not allowed here; use {allowed}",
        (*JSON_HEADERS, ("allow", allowed)),
    )
