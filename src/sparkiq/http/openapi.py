"""The OpenAPI 3.1 description of HTTP API v1, as a node serves it at GET /v1/openapi.json.

`document(settings)` describes every endpoint `HttpApi` answers, with the limits of the node
that serves it (range page size, multi-get keys, body and key size), the one error shape,
and who may call what. It describes the public contract only: the headers and parameters
nodes send each other when they forward (`x-sparkiq-hops`, `x-sparkiq-budget-ms`, the cluster
signature, `fallback_lag`, `partitions`) are refused from clients and are not in it.

tests/test_http_openapi.py keeps the description and the code together: it probes every
route the dispatcher answers against the paths described here, and fuzzes the API from this
document (schemathesis) for 5xx answers, hangs and answers that do not match it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import orjson

from sparkiq import __version__
from sparkiq.http.responses import Response
from sparkiq.http.settings import HttpSettings
from sparkiq.partitioner import Partitioner
from sparkiq.tables import Format, TableKind

OPENAPI_PATH = "/v1/openapi.json"

JsonObject = dict[str, Any]

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1

# Security requirements: any one of the two schemes (a list of alternatives), or none.
_AUTHENTICATED: list[JsonObject] = [{"bearerAuth": []}, {"apiKey": []}]
_OPEN: list[JsonObject] = []

_KEY_FORMATS = (
    "How a key is written depends on the table's `key_format` (see `GET /v1/tables`): "
    "`string`: the text itself; `int` and `long`: a decimal integer such as `42` or `-7`; "
    '`json` and `avro`: a JSON document, e.g. `"alice"` (with the quotes) or `{"id": 7}`; '
    "`bytes`: the key bytes in base64url."
)


@lru_cache(maxsize=8)
def rendered(settings: HttpSettings) -> Response:
    """The answer to GET /v1/openapi.json on a node with `settings`, rendered once."""
    return Response(200, orjson.dumps(document(settings)))


def _ref(name: str) -> JsonObject:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: JsonObject) -> JsonObject:
    return {"application/json": {"schema": schema}}


def _ok(description: str, schema: JsonObject) -> JsonObject:
    return {"description": description, "headers": _request_id_echo(), "content": _json(schema)}


def _request_id_echo() -> JsonObject:
    return {"x-request-id": {"$ref": "#/components/headers/RequestId"}}


def _error(description: str, headers: dict[str, str] | None = None) -> JsonObject:
    """An error answer (the one error shape); `headers`: header name -> component name."""
    described = _request_id_echo()
    for name, component in (headers or {}).items():
        described[name] = {"$ref": f"#/components/headers/{component}"}
    return {"description": description, "headers": described, "content": _json(_ref("Error"))}


def _auth_errors(*, per_table: bool) -> JsonObject:
    out: JsonObject = {
        "401": {"$ref": "#/components/responses/Unauthenticated"},
        "429": {"$ref": "#/components/responses/Overloaded"},
    }
    if per_table:
        out["403"] = {"$ref": "#/components/responses/Forbidden"}
    return out


def _table_errors(*, forwards: bool = True) -> JsonObject:
    """The failures every per-table endpoint may answer."""
    out: JsonObject = {
        "400": {"$ref": "#/components/responses/BadRequest"},
        "404": {"$ref": "#/components/responses/NotFound"},
        "413": {"$ref": "#/components/responses/TooLarge"},
        "500": {"$ref": "#/components/responses/InternalError"},
        "503": {"$ref": "#/components/responses/Unavailable"},
        **_auth_errors(per_table=True),
    }
    if forwards:
        out["508"] = {"$ref": "#/components/responses/LoopDetected"}
    return out


def _param(name: str) -> JsonObject:
    return {"$ref": f"#/components/parameters/{name}"}


def _operation(
    operation_id: str,
    summary: str,
    description: str,
    responses: JsonObject,
    *,
    tag: str,
    parameters: list[JsonObject] | None = None,
    security: list[JsonObject] | None = None,
) -> JsonObject:
    out: JsonObject = {
        "operationId": operation_id,
        "tags": [tag],
        "summary": summary,
        "description": description,
        "parameters": [*(parameters or []), _param("RequestId")],
        "responses": responses,
    }
    if security is not None:  # the document's default (credentials needed) otherwise
        out["security"] = security
    return out


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
                f"budget ({s.budget_s:g} s on this node), is answered 503 with `Retry-After`. "
                'Every error has the shape `{"error": {"code", "message"}}`; the message '
                "says what to do next.\n\n"
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


def _paths(s: HttpSettings) -> JsonObject:
    per_table = [_param("Table")]
    per_key = [_param("Table"), _param("Key")]
    return {
        "/v1/tables": {
            "get": _operation(
                "listTables",
                "List the tables",
                "Every table the node has read from the table catalog.",
                {"200": _ok("The tables.", _ref("TableList")), **_auth_errors(per_table=False)},
                tag="cluster",
            )
        },
        "/v1/tables/{table}/keys/{key}": {
            "get": _operation(
                "getKey",
                "Read one key",
                "The key's latest value, from the active replica of its partition (or a "
                "standby within `max_lag`), wherever it lives in the cluster. 404 with code "
                "`not_found` when the key is absent (or deleted), `unknown_table` when the "
                "table is.",
                {"200": _ok("The value.", _ref("KeyAnswer")), **_table_errors()},
                tag="tables",
                parameters=[*per_key, _param("MaxLag")],
            )
        },
        "/v1/tables/{table}/keys/{key}/windows": {
            "get": _operation(
                "getWindows",
                "Read the windows of one key (windowed tables)",
                "The key's windows whose start lies in [`from`, `to`] (epoch milliseconds, "
                f"both inclusive), in start order, at most {s.max_windows}. 400 with code "
                "`not_windowed` on a table that is not windowed.",
                {"200": _ok("The windows.", _ref("WindowsAnswer")), **_table_errors()},
                tag="tables",
                parameters=[*per_key, _param("WindowFrom"), _param("WindowTo"), _param("MaxLag")],
            )
        },
        "/v1/tables/{table}/keys/{key}/owner": {
            "get": _operation(
                "getOwner",
                "Find the nodes that hold one key",
                "The key's partition, its active node and its standbys, as this node's "
                "cluster map has them (smart clients route by it). Reads no store.",
                {
                    "200": _ok("The owners.", _ref("OwnerAnswer")),
                    **_table_errors(forwards=False),
                },
                tag="cluster",
                parameters=per_key,
            )
        },
        "/v1/tables/{table}/multi-get": {
            "post": {
                **_operation(
                    "multiGet",
                    "Read many keys",
                    "The values of the keys, in the order asked (null when absent). The node "
                    "sends one request per owner node, in parallel. Keys are JSON values in "
                    "the table's key format: strings for `string` keys, integers (or decimal "
                    "strings) for `int` and `long`, any JSON for `json`, base64url strings for "
                    f"`bytes`. At most {s.max_multi_get_keys} keys and {s.max_body_bytes} "
                    "bytes of body (413 beyond).",
                    {"200": _ok("The values.", _ref("MultiGetAnswer")), **_table_errors()},
                    tag="tables",
                    parameters=[*per_table, _param("MaxLag")],
                ),
                "requestBody": {
                    "required": True,
                    "content": _json(_ref("MultiGetRequest")),
                },
            }
        },
        "/v1/tables/{table}/range": {
            "get": _operation(
                "range",
                "Scan keys in order",
                "One page of the table's entries in key order, across all partitions. Keys "
                "are ordered by their stored form: strings and JSON by their UTF-8 bytes, "
                "integers numerically. `from` and `to` bound the keys (both inclusive), "
                "`prefix` keeps keys that start with it; all three are keys written as in a "
                "path. Pass `next_cursor` of a page as `cursor` to get the next one; it is "
                "null on the last page. On a windowed table each window is one item.",
                {"200": _ok("One page.", _ref("RangeAnswer")), **_table_errors()},
                tag="tables",
                parameters=[
                    *per_table,
                    _param("RangeFrom"),
                    _param("RangeTo"),
                    _param("Prefix"),
                    _param("Limit"),
                    _param("Cursor"),
                    _param("MaxLag"),
                ],
            )
        },
        "/v1/metadata": {
            "get": _operation(
                "metadata",
                "Read the cluster map",
                "This node's view of the cluster: the tables, each partition's active, "
                "standbys and warming nodes with their lags, every node's partitions, and "
                "this node's own replicas. Smart clients and proxies route by it.",
                {"200": _ok("The cluster map.", _ref("Metadata")), **_auth_errors(per_table=False)},
                tag="cluster",
            )
        },
        OPENAPI_PATH: {
            "get": _operation(
                "openapi",
                "This document",
                "The OpenAPI description of this API, with this node's limits.",
                {"200": _ok("The document.", {"type": "object"})},
                tag="operations",
                security=_OPEN,
            )
        },
        "/healthz": {
            "get": _operation(
                "healthz",
                "Liveness",
                "200 while the process answers HTTP.",
                {"200": _ok("Alive.", _ref("Status"))},
                tag="operations",
                security=_OPEN,
            )
        },
        "/readyz": {
            "get": _operation(
                "readyz",
                "Readiness",
                "200 once the node has joined the group and restored its active partitions; "
                "503 with code `not_ready` before.",
                {
                    "200": _ok("Ready.", _ref("Status")),
                    "503": _error("Not ready yet.", {"Retry-After": "RetryAfter"}),
                },
                tag="operations",
                security=_OPEN,
            )
        },
        "/metrics": {
            "get": _operation(
                "metrics",
                "Prometheus metrics",
                "Request counts and latencies by endpoint and outcome, forwarding errors, "
                "restore progress, in the Prometheus text format.",
                {
                    "200": {
                        "description": "The metrics.",
                        "headers": _request_id_echo(),
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
                tag="operations",
                security=_OPEN,
            )
        },
    }


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
        "parameters": _parameters(s),
        "headers": {
            "RetryAfter": {
                "description": "Seconds to wait before asking again.",
                "required": True,
                "schema": {"type": "integer", "minimum": 1},
            },
            "WwwAuthenticate": {
                "description": "The challenge of a 401: `Bearer`.",
                "required": True,
                "schema": {"type": "string", "pattern": "^Bearer"},
            },
            "RequestId": {
                "description": "The request's id (the caller's own if it sent a valid one).",
                "required": False,
                "schema": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"},
            },
        },
        "responses": _responses(s),
        "schemas": _schemas(s),
    }


def _parameters(s: HttpSettings) -> JsonObject:
    def query(name: str, description: str, schema: JsonObject) -> JsonObject:
        return {
            "name": name,
            "in": "query",
            "required": False,
            "description": description,
            "schema": schema,
        }

    long_ms: JsonObject = {
        "type": "integer",
        "format": "int64",
        "minimum": _LONG_MIN,
        "maximum": _LONG_MAX,
    }
    return {
        "Table": {
            "name": "table",
            "in": "path",
            "required": True,
            "description": "The table's name, percent-encoded (see `GET /v1/tables`).",
            "schema": {"type": "string", "examples": ["users"]},
        },
        "Key": {
            "name": "key",
            "in": "path",
            "required": True,
            "description": (
                "The key, percent-encoded as one path segment (a `/` inside it is `%2F`). "
                f"{_KEY_FORMATS} A key that does not parse in the table's format is 400; one "
                f"over {s.max_key_bytes} bytes is 413."
            ),
            "schema": {"type": "string", "examples": ["alice", "42"]},
        },
        "MaxLag": query(
            "max_lag",
            "A standby (or a replica still restoring) at most this many changelog offsets "
            "behind may answer instead of the active. Without it, only the active answers "
            "while it can; replicas within the node's bound stand in when it cannot.",
            {"type": "integer", "minimum": 0},
        ),
        "WindowFrom": query(
            "from", "Earliest window start (epoch ms, inclusive). Default: no bound.", long_ms
        ),
        "WindowTo": query(
            "to", "Latest window start (epoch ms, inclusive). Default: no bound.", long_ms
        ),
        "RangeFrom": query(
            "from", f"Smallest key (inclusive), written as in a path. {_KEY_FORMATS}", _STRING
        ),
        "RangeTo": query("to", "Largest key (inclusive), written as in a path.", _STRING),
        "Prefix": query(
            "prefix", "Only keys that start with this one (in their stored form).", _STRING
        ),
        "Limit": query(
            "limit",
            f"Items per page (default {s.default_range_limit}).",
            {
                "type": "integer",
                "minimum": 1,
                "maximum": s.max_range_limit,
                "default": s.default_range_limit,
            },
        ),
        "Cursor": query(
            "cursor",
            "The `next_cursor` of the previous page, as it was given.",
            {"type": "string", "pattern": "^[A-Za-z0-9_-]*$"},
        ),
        "RequestId": {
            "name": "x-request-id",
            "in": "header",
            "required": False,
            "description": (
                "An id for this request, echoed in the answer, carried to the node that "
                "answers and named in the nodes' logs. Up to 64 letters, digits, `.`, `_` or "
                "`-`; anything else is replaced by an id the node makes."
            ),
            "schema": {"type": "string"},
        },
    }


_STRING: JsonObject = {"type": "string"}


def _responses(s: HttpSettings) -> JsonObject:
    return {
        "BadRequest": _error(
            "A key, parameter or body that does not parse (`bad_request`), an unknown "
            "parameter, or a window query on a table that is not windowed (`not_windowed`)."
        ),
        "NotFound": _error("No such table (`unknown_table`) or key (`not_found`)."),
        "TooLarge": _error(
            f"A key over {s.max_key_bytes} bytes, a body over {s.max_body_bytes} bytes or "
            f"over {s.max_multi_get_keys} keys (`too_large`)."
        ),
        "InternalError": _error(
            "A stored value that is not in the table's format (`undecodable_value`), or a bug "
            "(`internal`, logged by the node)."
        ),
        "Unavailable": _error(
            "No replica allowed to answer could within the request's budget: the partition "
            "is restoring or moving, its owner is unreachable, or the node has not read the "
            "table catalog yet (`unavailable`). Retry after `Retry-After` seconds, or pass "
            "`max_lag` to let a standby answer.",
            {"Retry-After": "RetryAfter"},
        ),
        "LoopDetected": _error(
            "The nodes forwarded the request to each other up to the hop limit: they disagree "
            "on the owner during a rebalance (`loop_detected`). Retry shortly."
        ),
        "Unauthenticated": _error(
            "Credentials missing, invalid or expired (`unauthenticated`).",
            {"WWW-Authenticate": "WwwAuthenticate"},
        ),
        "Forbidden": _error(
            "The credentials do not grant this table (`forbidden`); also for a table that "
            "does not exist, so that table names do not leak."
        ),
        "Overloaded": _error(
            "The node is answering as many requests as it may at once (`overloaded`).",
            {"Retry-After": "RetryAfter"},
        ),
    }


def _schemas(s: HttpSettings) -> JsonObject:
    key: JsonObject = {
        "description": (
            "The key as JSON: a string for `string` keys, an integer for `int` and `long`, "
            "the document for `json` and `avro`, base64url for `bytes`."
        )
    }
    value: JsonObject = {
        "description": (
            "The value as JSON: the document for `json` and `avro` values, a string or "
            "integer for `string`, `int` and `long`, base64url for `bytes`."
        )
    }
    offset: JsonObject = {
        "type": ["integer", "null"],
        "minimum": 0,
        "description": (
            "The changelog offset the answering replica had reached: every record before it "
            "is reflected in the answer."
        ),
    }
    offsets: JsonObject = {
        "type": "object",
        "description": "Partition number -> the offset its answering replica had reached.",
        "propertyNames": {"pattern": "^[0-9]+$"},
        "additionalProperties": {"type": ["integer", "null"]},
    }
    partition: JsonObject = {"type": "integer", "minimum": 0}
    node: JsonObject = {"type": "string", "description": "URL of the node that read the store."}
    standby: JsonObject = {
        "type": "boolean",
        "description": "Whether a standby (not the active) answered, for any part.",
    }
    windowed_item: JsonObject = {
        "start": {"type": "integer", "description": "Window start, epoch ms."},
        "end": {"type": "integer", "description": "Window end (start + size), epoch ms."},
    }
    tp: JsonObject = {
        "type": "array",
        "prefixItems": [{"type": "string"}, {"type": "integer"}],
        "minItems": 2,
        "maxItems": 2,
        "description": "[table, partition]",
    }
    return {
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["code", "message"],
                    "properties": {
                        "code": {
                            "type": "string",
                            "description": (
                                "What went wrong, for programs: bad_request, not_windowed, "
                                "unknown_table, not_found, no_route, method_not_allowed, "
                                "too_large, unauthenticated, forbidden, overloaded, "
                                "unavailable, not_ready, loop_detected, undecodable_value, "
                                "internal."
                            ),
                        },
                        "message": {
                            "type": "string",
                            "description": "What went wrong and what to do next, for people.",
                        },
                    },
                }
            },
        },
        "Status": {
            "type": "object",
            "required": ["status"],
            "properties": {"status": {"const": "ok"}},
        },
        "TableSummary": {
            "type": "object",
            "required": ["name", "topic", "partitions", "kind", "key_format", "value_format"],
            "properties": {
                "name": {"type": "string"},
                "topic": {"type": "string", "description": "The table's changelog topic."},
                "partitions": {"type": "integer", "minimum": 1},
                "kind": {"enum": [k.value for k in TableKind]},
                "key_format": {"enum": [f.value for f in Format]},
                "value_format": {"enum": [f.value for f in Format]},
                "window_size_ms": {"type": "integer", "minimum": 1},
                "description": {"type": "string"},
                "partitioner": {
                    "enum": [p.value for p in Partitioner],
                    "description": "How the producers placed keys in partitions; `any`: "
                    "unknown, so a lookup asks every partition.",
                },
                "misplaced_records": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Records the cluster found in another partition than the "
                    "partitioner gives their keys; while any are known, a key missing from "
                    "its partition is looked for in every other one before a 404.",
                },
            },
        },
        "TableList": {
            "type": "object",
            "required": ["tables"],
            "properties": {"tables": {"type": "array", "items": _ref("TableSummary")}},
        },
        "KeyAnswer": {
            "type": "object",
            "required": ["table", "key", "value", "partition", "offset", "node", "standby"],
            "properties": {
                "table": _STRING,
                "key": key,
                "value": value,
                "partition": partition,
                "offset": offset,
                "node": node,
                "standby": standby,
            },
        },
        "WindowsAnswer": {
            "type": "object",
            "required": ["table", "key", "items", "partition", "offset", "node", "standby"],
            "properties": {
                "table": _STRING,
                "key": key,
                "items": {
                    "type": "array",
                    "maxItems": s.max_windows,
                    "items": {
                        "type": "object",
                        "required": ["start", "end", "value"],
                        "properties": {**windowed_item, "value": value},
                    },
                },
                "partition": partition,
                "offset": offset,
                "node": node,
                "standby": standby,
            },
        },
        "OwnerAnswer": {
            "type": "object",
            "required": ["table", "key", "partition", "active", "standbys"],
            "properties": {
                "table": _STRING,
                "key": key,
                "partition": partition,
                "active": {
                    "type": ["string", "null"],
                    "description": "URL of the active node; null while nobody is assigned.",
                },
                "standbys": {"type": "array", "items": _STRING},
            },
        },
        "MultiGetRequest": {
            "type": "object",
            "required": ["keys"],
            "properties": {
                "keys": {
                    "type": "array",
                    "maxItems": s.max_multi_get_keys,
                    "items": key,
                    "examples": [["alice", "bob"]],
                }
            },
        },
        "MultiGetAnswer": {
            "type": "object",
            "required": ["items", "offsets", "standby"],
            "properties": {
                "items": {
                    "type": "array",
                    "description": "One item per key asked, in the order asked.",
                    "items": {
                        "type": "object",
                        "required": ["key", "value"],
                        "properties": {
                            "key": key,
                            "value": {**value, "description": "The value; null when absent."},
                        },
                    },
                },
                "offsets": offsets,
                "standby": standby,
            },
        },
        "RangeAnswer": {
            "type": "object",
            "required": ["items", "next_cursor", "offsets", "standby"],
            "properties": {
                "items": {
                    "type": "array",
                    "maxItems": s.max_range_limit,
                    "items": {
                        "type": "object",
                        "required": ["key", "value"],
                        "properties": {
                            "key": key,
                            "value": value,
                            **windowed_item,
                        },
                        "description": "`start` and `end` on windowed tables only.",
                    },
                },
                "next_cursor": {
                    "type": ["string", "null"],
                    "description": "Pass as `cursor` for the next page; null on the last.",
                },
                "offsets": offsets,
                "standby": standby,
            },
        },
        "Metadata": {
            "type": "object",
            "required": ["node", "generation", "tables", "partitions", "nodes"],
            "properties": {
                "node": {"type": "string", "description": "URL of the node that answered."},
                "generation": {
                    "type": ["integer", "null"],
                    "description": "The consumer group generation the map is from.",
                },
                "ready": {"type": "boolean"},
                "restored_records": {"type": "integer", "minimum": 0},
                "node_id": {
                    "type": "string",
                    "description": "This node's id, kept in its state dir.",
                },
                "refused": {
                    "type": "array",
                    "description": "Nodes that advertise a URL an earlier node has: they "
                    "hold nothing until given their own --advertised-url.",
                    "items": {
                        "type": "object",
                        "required": ["node_id", "url"],
                        "properties": {"node_id": _STRING, "url": _STRING},
                    },
                },
                "tables": {"type": "array", "items": _ref("TableSummary")},
                "partitions": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["table", "partition", "active", "standbys"],
                        "properties": {
                            "table": _STRING,
                            "topic": _STRING,
                            "partition": partition,
                            "active": {"type": ["string", "null"]},
                            "standbys": {"type": "array", "items": _STRING},
                            "warming": {"type": "array", "items": _STRING},
                            "lags": {
                                "type": "object",
                                "description": "Node URL -> offsets behind the changelog end.",
                                "additionalProperties": {"type": "integer"},
                            },
                            "misplaced": {"type": "integer", "minimum": 0},
                        },
                    },
                },
                "nodes": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["url"],
                        "properties": {
                            "url": _STRING,
                            "active": {"type": "array", "items": tp},
                            "standby": {"type": "array", "items": tp},
                            "warming": {"type": "array", "items": tp},
                            "lags": {
                                "type": "object",
                                "description": "`table/partition` -> offsets behind the end.",
                                "additionalProperties": {"type": "integer"},
                            },
                        },
                    },
                },
                "local": {
                    "type": "array",
                    "description": "This node's replicas and how far each has restored.",
                    "items": {
                        "type": "object",
                        "required": ["table", "partition", "state"],
                        "properties": {
                            "table": _STRING,
                            "partition": partition,
                            "state": {"enum": ["restoring", "active", "standby"]},
                            "position": {"type": "integer"},
                            "end": {"type": "integer"},
                            "lag": {"type": "integer"},
                            "misplaced": {"type": "integer", "minimum": 0},
                        },
                    },
                },
            },
        },
    }
