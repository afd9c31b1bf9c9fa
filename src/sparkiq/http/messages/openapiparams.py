"""The parameters of HTTP API v1's operations, as the OpenAPI document describes them.

`parameters(settings)` gives them by component name, with the limits of the node that serves
the document; `sparkiq.http.messages.openapi` refers to them from its operations.
"""

from __future__ import annotations

from typing import Any

from sparkiq.http.settings import HttpSettings

JsonObject = dict[str, Any]

_KEY_FORMATS = (
    "How a key is written depends on the table's `key_format` (see `GET /v1/tables`): "
    "`string`: the text itself; `int` and `long`: a decimal integer such as `42` or `-7`; "
    '`json` and `avro`: a JSON document, e.g. `"alice"` (with the quotes) or `{"id": 7}`; '
    "`bytes`: the key bytes in base64url."
)
_STRING: JsonObject = {"type": "string"}
_SOURCE_POSITIONS = r"^[^,:]+:[0-9]+:[0-9]+(,[^,:]+:[0-9]+:[0-9]+)*$"
_TIMES = (
    "Epoch milliseconds (`1767225600000`), ISO-8601 (`2026-01-01T00:00:00Z`; UTC when it names "
    "no offset) or relative to the node's clock (`now`, `-15m`, `-90s`, `-2h`, `-1d`, "
    "`%2B5m`; units `ms`, `s`, `m`, `h`, `d`, `w`)."
)
_TIME: JsonObject = {
    "type": "string",
    "examples": ["-15m", "1767225600000", "2026-01-01T00:00:00Z"],
}


def parameters(s: HttpSettings) -> JsonObject:
    """The parameters of the document's operations, by component name, with the limits of
    a node with `s`."""
    # name -> (where, parameter, description, schema); path parameters are required.
    table: dict[str, tuple[str, str, str, JsonObject]] = {
        "Table": ("path", "table", "The table's name, percent-encoded (see `GET /v1/tables`).",
                  {"type": "string", "examples": ["users"]}),
        "Key": ("path", "key",
                "The key, percent-encoded as one path segment (a `/` inside it is `%2F`). "
                f"{_KEY_FORMATS} A key that does not parse in the table's format is 400; one "
                f"over {s.max_key_bytes} bytes is 413.",
                {"type": "string", "examples": ["alice", "42"]}),
        "MaxLag": ("query", "max_lag",
                   "A standby (or a replica still restoring) at most this many changelog "
                   "offsets behind may answer instead of the active. Without it, only the "
                   "active answers while it can; replicas within the node's bound stand in "
                   "when it cannot.",
                   {"type": "integer", "minimum": 0}),
        "After": ("query", "after",
                  "A consistency token (the `token` of an earlier answer, from any node): "
                  "only a replica that has applied at least those changelog offsets of the "
                  "partitions read may answer. A node whose replica is behind waits for it "
                  "within the request budget, then answers 503 with `Retry-After`; never an "
                  "older answer. A token that does not parse (or names a partition the "
                  "table has not) is 400.",
                  {"type": "string", "pattern": r"^([0-9]+-[0-9]+(\.[0-9]+-[0-9]+)*)?$"}),
        "AfterSource": ("query", "after_source",
                        "Read your own writes through the pipeline: `TOPIC:PARTITION:OFFSET` "
                        "(comma-separated for several) of records produced to the pipeline's "
                        "source topics. The node waits, within the request budget, until the "
                        "table's pipeline (`sparkiq run`) has committed a micro-batch past them, "
                        "then answers from a replica that has applied what that batch wrote; "
                        "503 with `Retry-After` if that does not happen in time.",
                        {"type": "string", "pattern": _SOURCE_POSITIONS}),
        "WindowFrom": ("query", "from",
                       f"Earliest window start (inclusive). {_TIMES} Default: no bound.", _TIME),
        "WindowTo": ("query", "to",
                     "Latest window start (inclusive), written as `from`. Default: no bound.",
                     _TIME),
        "KeyFrom": ("query", "key_from",
                    f"Smallest key (inclusive), written as in a path. {_KEY_FORMATS}", _STRING),
        "KeyTo": ("query", "key_to", "Largest key (inclusive), written as in a path.", _STRING),
        "Order": ("query", "order",
                  "`asc` (the default): keys, and each key's windows, from the first up; "
                  "`desc`: from the last down (the newest window first).",
                  {"type": "string", "enum": ["asc", "desc"], "default": "asc"}),
        "WindowLimit": ("query", "limit",
                        f"Windows per page (default and at most {s.max_windows}).",
                        {"type": "integer", "minimum": 1, "maximum": s.max_windows,
                         "default": s.max_windows}),
        "SinceMs": ("query", "since_ms",
                    "Only batches that finished after this time (epoch ms). Default: ten "
                    "minutes before now.",
                    {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}),
        "Peers": ("query", "peers",
                  "`true`: also ask every other node that holds a replica for its own "
                  "replicas and their lag now (`peers` in the answer). Not accepted on a "
                  "request one node forwards to another.",
                  {"type": "boolean", "default": False}),
        "RangeFrom": ("query", "from",
                      f"Smallest key (inclusive), written as in a path. {_KEY_FORMATS}", _STRING),
        "RangeTo": ("query", "to", "Largest key (inclusive), written as in a path.", _STRING),
        "Prefix": ("query", "prefix",
                   "Only keys that start with this one (in their stored form).", _STRING),
        "Limit": ("query", "limit", f"Items per page (default {s.default_range_limit}).",
                  {"type": "integer", "minimum": 1, "maximum": s.max_range_limit,
                   "default": s.default_range_limit}),
        "Cursor": ("query", "cursor", "The `next_cursor` of the previous page, as it was given.",
                   {"type": "string", "pattern": "^[A-Za-z0-9_-]*$"}),
        "LastEventId": ("header", "last-event-id",
                        "The id of the last event a watch received (`<partition>-<offset>`), "
                        "to resume it.",
                        {"type": "string", "pattern": "^[0-9]+-[0-9]+$"}),
        "ChangesLastEventId": ("header", "last-event-id",
                               "The id of the last event a watch of changes received (the "
                               "vector `<partition>-<position>` joined by `.`), to resume it.",
                               {"type": "string",
                                "pattern": "^([0-9]+-[0-9]+([.][0-9]+-[0-9]+)*)?$"}),
        "RequestId": ("header", "x-request-id",
                      "An id for this request, echoed in the answer, carried to the node that "
                      "answers and named in the nodes' logs. Up to 64 letters, digits, `.`, "
                      "`_` or `-`; anything else is replaced by an id the node makes.",
                      _STRING),
    }  # fmt: skip
    out: JsonObject = {}
    for name, (where, param, description, schema) in table.items():
        out[name] = {
            "name": param,
            "in": where,
            "required": where == "path",
            "description": description,
            "schema": dict(schema),
        }
        if where == "query" and (schema.get("type") == "integer" or "enum" in schema):
            # An empty value (`max_lag=`, `order=`) is the parameter's default.
            out[name]["allowEmptyValue"] = True
    return out
