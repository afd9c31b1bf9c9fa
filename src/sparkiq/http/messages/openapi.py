"""The OpenAPI 3.1 description of HTTP API v1, as a node serves it at GET /v1/openapi.json.

`document(settings)` describes every endpoint `HttpApi` answers, with the limits of the node
that serves it (range page size, multi-get keys, windows, body and key size), the one error
shape, and who may call what. The schemas of the answers are made from the models of
`sparkiq.http.messages.models`; the error codes, and which status each has, from
`sparkiq.http.messages.errorcodes.ErrorCode`. Here are the endpoints (`_operations`: parameters,
answer model, error answers) as a table; the parameters are `sparkiq.http.messages.openapiparams`'s,
the error answers (`ERRORS`: which codes each carries) `sparkiq.http.messages.openapierrors`'.

It describes the public contract only: the headers and parameters nodes send each other when
they forward (`x-sparkiq-hops`, `x-sparkiq-budget-ms`, the cluster signature, `fallback_lag`,
`partitions`) are refused from clients and are not in it.

tests/unit/http/test_openapi.py keeps the description and the code together: it probes every
route the dispatcher answers against the paths described here, and fuzzes the API from this
document (schemathesis) for 5xx answers, hangs and answers that do not match it;
tests/unit/http/test_models.py validates real answers with the models, and
tests/unit/http/test_errorcodes.py checks that every code is described and sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import orjson
from pydantic import BaseModel

from sparkiq import __version__
from sparkiq.http.messages import models
from sparkiq.http.messages.openapierrors import (
    ERRORS,
    HEADERS,
    SCHEMAS,
    error_answer,
    header_component,
    ref,
    request_id_echo,
)
from sparkiq.http.messages.openapiparams import JsonObject, parameters
from sparkiq.http.messages.responses import Response
from sparkiq.http.settings import HttpSettings

OPENAPI_PATH = "/v1/openapi.json"

# Security requirements: any one of the two schemes (a list of alternatives), or none.
_AUTHENTICATED: list[JsonObject] = [{"bearerAuth": []}, {"apiKey": []}]
_OPEN: list[JsonObject] = []

_STRING: JsonObject = {"type": "string"}
_EVENTS: JsonObject = {
    "type": "string",
    "description": "`retry:`, then events of `id:` and one `data:` line of JSON each, and "
    "`: keep-alive` comments.",
}

# Node-specific limits of the answers' models: (schema, property) -> the setting that bounds
# the property's items.
_MAX_ITEMS = {
    ("WindowsAnswer", "items"): "max_windows",
    ("MultiGetRequest", "keys"): "max_multi_get_keys",
    ("RangeAnswer", "items"): "max_range_limit",
    ("WindowRangeAnswer", "items"): "max_range_limit",
}


@lru_cache(maxsize=8)
def rendered(settings: HttpSettings) -> Response:
    """The answer to GET /v1/openapi.json on a node with `settings`, rendered once."""
    return Response(200, orjson.dumps(document(settings)))


def document(settings: HttpSettings | None = None) -> dict[str, object]:
    """The OpenAPI 3.1 document of HTTP API v1 on a node with `settings` (default limits)."""
    s = settings or HttpSettings()
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "sparkiq HTTP API",
            "version": __version__,
            "summary": "The state of PySpark streaming pipelines, queryable by key from any node.",
            "description": (
                "Every serving node answers every request: it reads its own replica of the "
                "key's partition or forwards the request to the node that owns it, and passes "
                "the owner's answer back as it is. Reads report the changelog `offset` their "
                "replica had reached and whether a `standby` answered. A partition that is "
                "restoring or moving, with no replica allowed to answer within the request's "
                f"budget ({s.request_budget_s:g} s on this node), is answered 503 with "
                "`Retry-After`. "
                'Every error has the shape `{"error": {"code", "message"}}`; the message '
                "says what to do next, the code (`ErrorCode`) what went wrong.\n\n"
                "Every `/v1` endpoint needs credentials (a bearer JWT or an API key) when the "
                "node is started with authentication; `/healthz`, `/readyz`, `/metrics` and "
                "this document are open unless the node is started with `--protect-ops`. Limits "
                "given below (key size, page size, multi-get keys, body size) are this node's."
                "\n\n"
                "Connections (HTTP/1.1, keep-alive): one that sends no request within "
                f"{s.header_timeout_s:g} s is closed, one idle between requests after "
                f"{s.idle_timeout_s:g} s, and a request whose head or body has not fully "
                f"arrived {s.request_timeout_s:g} s after its first bytes is answered 408. Past "
                f"the node's connection limit{_limit(s)}, a new connection is answered 503 "
                "with code `too_many_connections` and `Retry-After`, and closed."
            ),
        },
        "servers": [{"url": "/", "description": "any serving node"}],
        "tags": [
            {"name": "tables", "description": "Reads of tables: keys, windows, ranges."},
            {"name": "cluster", "description": "Tables, owners and the cluster map."},
            {"name": "operations", "description": "Health, readiness, metrics, this document."},
        ],
        "security": _AUTHENTICATED,
        "paths": _paths(s),
        "components": _components(s),
    }


def _limit(s: HttpSettings) -> str:
    """The connection limit as the description gives it (none set: from the open-file limit)."""
    if s.max_connections is None:
        return " (derived from its open-file limit)"
    return f" ({s.max_connections} connections)"


# -- endpoints -------------------------------------------------------------------------------------

# The error answers (`ERRORS`) of each kind of endpoint. Every request may meet the
# connection's timeout (408), and a connection past the limit is answered 503.
_ON_TABLE = (
    "BadRequest",
    "Unauthenticated",
    "Forbidden",
    "NotFound",
    "RequestTimeout",
    "TooLarge",
    "Overloaded",
    "InternalError",
    "Unavailable",
    "LoopDetected",
)
_ON_KEY_OWNER = tuple(e for e in _ON_TABLE if e != "LoopDetected")  # reads the map only
_ON_NODE = ("Unauthenticated", "RequestTimeout", "Overloaded", "ConnectionLimit")
# Open unless the node protects them (401 then); never refused for load.
_ON_OPS = ("Unauthenticated", "RequestTimeout", "ConnectionLimit")


@dataclass(frozen=True)
class _Operation:
    path: str
    method: str
    operation_id: str
    tag: str
    summary: str
    description: str
    answer: type[BaseModel] | JsonObject  # the 200's schema: a model, or a schema as it is
    answered: str  # the 200's description
    errors: tuple[str, ...]
    params: tuple[str, ...] = ()
    body: type[BaseModel] | None = None
    open: bool = False  # no credentials needed (the document's default: they are)
    content_type: str = "application/json"


# The parameters every read of a table's values takes.
_READ_PARAMS = ("MaxLag", "After", "AfterSource")


def _operations(s: HttpSettings) -> list[_Operation]:
    per_key = ("Table", "Key")
    return [
        _Operation(
            "/v1/tables", "get", "listTables", "cluster", "List the tables",
            "Every table the node has read from the table catalog.",
            models.TableList, "The tables.", _ON_NODE,
        ),
        _Operation(
            "/v1/tables/{table}/keys/{key}", "get", "getKey", "tables", "Read one key",
            "The key's latest value, from the active replica of its partition (or a "
            "standby within `max_lag`), wherever it lives in the cluster. 404 with code "
            "`not_found` when the key is absent (or deleted), `unknown_table` when the "
            "table is.",
            models.KeyAnswer, "The value.", _ON_TABLE, (*per_key, *_READ_PARAMS),
        ),
        _Operation(
            "/v1/tables/{table}/keys/{key}/windows", "get", "getWindows", "tables",
            "Read the windows of one key (windowed tables)",
            "One page of the key's windows whose start lies in [`from`, `to`] (both "
            "inclusive), in start order (`order=desc`: the newest first), `limit` at most "
            f"(default and at most {s.max_windows}). Pass `next_cursor` as `cursor` for the "
            "next page; it is null on the last. 400 with code `not_windowed` on a table that "
            "is not windowed.",
            models.WindowsAnswer, "The windows.", _ON_TABLE,
            (*per_key, "WindowFrom", "WindowTo", "WindowLimit", "Cursor", "Order",
             *_READ_PARAMS),
        ),
        _Operation(
            "/v1/tables/{table}/windows", "get", "windowRange", "tables",
            "Read the windows of many keys (windowed tables)",
            "One page of the windows whose start lies in [`from`, `to`] (both inclusive) of "
            "the keys in [`key_from`, `key_to`] or starting with `prefix` (none: every key), "
            "across all partitions, in key order and then window start (`order=desc`: the "
            "last key first, each key's newest window first); keys are ordered by their "
            "stored form as in `range`. Starts are read within 2^55 ms (about 1.1 million "
            "years) of 1970. A page examines a bounded number of windows per "
            "partition: "
            "one may hold fewer than `limit` items and still have a `next_cursor`; page on "
            "until it is null. 400 with code `not_windowed` on a table that is not windowed.",
            models.WindowRangeAnswer, "One page.", _ON_TABLE,
            ("Table", "WindowFrom", "WindowTo", "KeyFrom", "KeyTo", "Prefix", "Limit",
             "Cursor", "Order", *_READ_PARAMS),
        ),
        _Operation(
            "/v1/tables/{table}/keys/{key}/watch", "get", "watchKey", "tables",
            "Watch one key's changes",
            "Server-sent events (`text/event-stream`): first the key's state (the JSON of "
            "`GET .../keys/{key}`, `value` null when absent), then one event per change the "
            "replica applies, in order, each `id: <partition>-<offset>` with `offset` the "
            "replica's position once the change was applied. Any node serves any key "
            "(relayed from a node that holds it); when the replica goes the stream goes on "
            "from another and never sends an older value after a newer one. Idle streams get "
            f"a comment every {s.watch_heartbeat_s:g} s. Resume with `Last-Event-ID`: the "
            "state comes first only if the partition moved on since. A stream ends with an "
            "`unavailable` event when no replica can be found within the request budget, "
            f"a `dropped` one when the client falls {s.watch_queue} changes behind, each "
            "followed by `retry:`.",
            _EVENTS, "The event stream.",
            tuple("WatchUnavailable" if e == "Unavailable" else e for e in _ON_TABLE),
            (*per_key, "MaxLag", "LastEventId"), content_type="text/event-stream",
        ),
        _Operation(
            "/v1/tables/{table}/keys/{key}/owner", "get", "getOwner", "cluster",
            "Find the nodes that hold one key",
            "The key's partition, its active node and its standbys, as this node's "
            "cluster map has them (smart clients route by it). Reads no store.",
            models.OwnerAnswer, "The owners.", _ON_KEY_OWNER, per_key,
        ),
        _Operation(
            "/v1/tables/{table}/multi-get", "post", "multiGet", "tables", "Read many keys",
            "The values of the keys, in the order asked (null when absent). The node "
            "sends one request per owner node, in parallel. Keys are JSON values in "
            "the table's key format: strings for `string` keys, integers (or decimal "
            "strings) for `int` and `long`, any JSON for `json`, base64url strings for "
            f"`bytes`. At most {s.max_multi_get_keys} keys and {s.max_body_bytes} "
            "bytes of body (413 beyond).",
            models.MultiGetAnswer, "The values.", _ON_TABLE, ("Table", *_READ_PARAMS),
            body=models.MultiGetRequest,
        ),
        _Operation(
            "/v1/tables/{table}/range", "get", "range", "tables", "Scan keys in order",
            "One page of the table's entries in key order, across all partitions. Keys "
            "are ordered by their stored form: strings and JSON by their UTF-8 bytes, "
            "integers numerically. `from` and `to` bound the keys (both inclusive), "
            "`prefix` keeps keys that start with it; all three are keys written as in a "
            "path. Pass `next_cursor` of a page as `cursor` to get the next one; it is "
            "null on the last page. `order=desc` pages from the last key down. On a "
            "windowed table each window is one item.",
            models.RangeAnswer, "One page.", _ON_TABLE,
            ("Table", "RangeFrom", "RangeTo", "Prefix", "Limit", "Cursor", "Order",
             *_READ_PARAMS),
        ),
        _Operation(
            "/v1/tables/{table}/changes", "get", "watchChanges", "tables",
            "Watch the changes of a range of keys",
            "Server-sent events (`text/event-stream`) of every change any replica of the "
            "table applies to a key in the range (`prefix`, or `from`..`to` as in `range`; "
            "neither: the whole table), across all partitions, in changelog order within "
            "each. First `retry:`, then one `positions` event (`event: positions`, data "
            "`{\"table\", \"positions\": {\"<partition>\": <position>}}`) with the vector "
            "the stream starts from as its id; then one event per change, its data the JSON "
            "of `GET .../keys/{key}` (`value` null for a delete, `start` and `end` added on "
            "a windowed table, `offset` the replica's position once the change was applied), "
            "its id the vector of positions delivered in every partition "
            "(`<partition>-<position>` joined by `.`, e.g. `0-120.1-98`). Any node serves "
            "the watch (relaying the partitions it holds no replica of); when a replica "
            "goes the stream goes on from another and never goes back in a partition. Idle "
            f"streams get a comment every {s.watch_heartbeat_s:g} s. Resume with "
            "`Last-Event-ID`: every change in the range past those positions comes, none "
            "twice (read again from the changelog where the replica is further on; from "
            "its earliest record if older ones were compacted). A stream ends with an "
            "`unavailable` event when no replica of a partition can be found within the "
            "request budget or its changelog cannot be read, a `dropped` one when the "
            f"client falls {s.watch_queue} changes behind, each followed by `retry:`.",
            _EVENTS, "The event stream.",
            tuple("WatchUnavailable" if e == "Unavailable" else e for e in _ON_TABLE),
            ("Table", "RangeFrom", "RangeTo", "Prefix", "MaxLag", "ChangesLastEventId"),
            content_type="text/event-stream",
        ),
        _Operation(
            "/v1/metadata", "get", "metadata", "cluster", "Read the cluster map",
            "This node's view of the cluster: the tables, each partition's active, "
            "standbys and warming nodes with their lags, every node's partitions, and "
            "this node's own replicas. Smart clients and proxies route by it. The lags of "
            "other nodes' replicas in the map are those they reported at the last "
            "rebalance; with `peers=true` the node also asks every other node holding a "
            "replica for its own replicas now (`peers`; one that does not answer within "
            f"{s.active_timeout_s:g} s is listed with its `error`).",
            models.Metadata, "The cluster map.", ("BadRequest", *_ON_NODE), ("Peers",),
        ),
        _Operation(
            "/v1/pipeline", "get", "pipeline", "cluster", "Watch the pipeline's queries",
            "Every streaming query of the pipeline `sparkiq run` runs, as this node heard "
            "of it (the topic `<app>.queries`): its latest micro-batch (batch id, input and "
            "processing rates, duration, state rows, dead letters) and its batches since "
            "`since_ms` (default: the last ten minutes). A query is listed to a caller who "
            "may read every table it writes; one that writes no table, to a caller who may "
            "read every table. No queries: no pipeline has published its progress yet.",
            models.Pipeline, "The queries.", ("BadRequest", *_ON_NODE), ("SinceMs",),
        ),
        _Operation(
            OPENAPI_PATH, "get", "openapi", "operations", "This document",
            "The OpenAPI description of this API, with this node's limits.",
            {"type": "object"}, "The document.", _ON_OPS, open=True,
        ),
        _Operation(
            "/healthz", "get", "healthz", "operations", "Liveness",
            "200 while the process answers HTTP.",
            models.Status, "Alive.", _ON_OPS, open=True,
        ),
        _Operation(
            "/readyz", "get", "readyz", "operations", "Readiness",
            "200 once the node has joined the group and restored its active partitions; "
            "503 with code `not_ready` before. A ready node stays ready while its Kafka "
            "brokers are unreachable (it answers what it holds); `kafka` says so.",
            models.Readiness, "Ready.",
            tuple("NotReady" if e == "ConnectionLimit" else e for e in _ON_OPS), open=True,
        ),
        _Operation(
            "/metrics", "get", "metrics", "operations", "Prometheus metrics",
            "Request counts and latencies by endpoint and outcome, forwarding errors, "
            "restore progress, in the Prometheus text format.",
            _STRING, "The metrics.", _ON_OPS, open=True, content_type="text/plain",
        ),
    ]  # fmt: skip


def _paths(s: HttpSettings) -> JsonObject:
    paths: JsonObject = {}
    for op in _operations(s):
        answer = op.answer if isinstance(op.answer, dict) else ref(op.answer.__name__)
        errors = {str(ERRORS[name].status): _response_ref(name) for name in op.errors}
        described: JsonObject = {
            "operationId": op.operation_id,
            "tags": [op.tag],
            "summary": op.summary,
            "description": op.description,
            "parameters": [_param(p) for p in (*op.params, "RequestId")],
            "responses": {
                "200": {
                    "description": op.answered,
                    "headers": request_id_echo(),
                    "content": {op.content_type: {"schema": answer}},
                },
                **dict(sorted(errors.items())),
            },
        }
        if op.open:  # the document's default (credentials needed) otherwise
            described["security"] = _OPEN
        if op.body is not None:
            described["requestBody"] = {"required": True, "content": _json(op.body)}
        paths.setdefault(op.path, {})[op.method] = described
    return paths


def _json(model: type[BaseModel]) -> JsonObject:
    return {"application/json": {"schema": ref(model.__name__)}}


def _param(name: str) -> JsonObject:
    return {"$ref": f"#/components/parameters/{name}"}


def _response_ref(name: str) -> JsonObject:
    return {"$ref": f"#/components/responses/{name}"}


# -- components ------------------------------------------------------------------------------------


def _components(s: HttpSettings) -> JsonObject:
    return {
        "securitySchemes": {
            "bearerAuth": {
                "type": "http",
                "scheme": "bearer",
                "bearerFormat": "JWT",
                "description": (
                    "A JWT (HS256, RS256 or ES256) whose claims name the tables the caller may "
                    "read. Missing, invalid or expired: 401 with `WWW-Authenticate: Bearer`; "
                    "a table the token does not grant: 403."
                ),
            },
            "apiKey": {
                "type": "apiKey",
                "in": "header",
                "name": "X-API-Key",
                "description": "A static API key the node was configured with; same rules.",
            },
        },
        "parameters": parameters(s),
        "headers": {
            **{header_component(name): header for name, header in HEADERS.items()},
            "RequestId": {
                "description": "The request's id (the caller's own if it sent a valid one).",
                "required": False,
                "schema": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"},
            },
        },
        "responses": {name: error_answer(error, s) for name, error in ERRORS.items()},
        "schemas": _schemas(s),
    }


# -- schemas ---------------------------------------------------------------------------------------


def _schemas(s: HttpSettings) -> JsonObject:
    """The models' schemas with the limits of a node with `s`."""
    schemas = models.json_schemas(SCHEMAS)
    for (model, prop), setting in _MAX_ITEMS.items():
        schemas[model]["properties"][prop]["maxItems"] = getattr(s, setting)
    return schemas
