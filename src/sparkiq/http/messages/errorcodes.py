"""Every code of the one error shape `{"error": {"code", "message"}}`, with its status.

`ErrorCode` is the only list of them: the node answers with its members
(`sparkiq.http.messages.responses.error_response`), the client compares codes with them, and the
OpenAPI document (`sparkiq.http.messages.openapi`) lists them, each with the `when` written here.
tests/unit/http/test_errorcodes.py fails when a member is never sent or a code sent is no member.

Each code has one HTTP status (`ErrorCode.status`). Query failures
(`sparkiq.core.queries.FailureReason`) have a code of the same name, the HTTP layer's others are
its own. This module imports nothing of the server: the client imports it.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """What went wrong, for programs: the `code` of an error answer."""

    status: int  # the HTTP status of every answer with this code
    when: str  # when a node answers with it, for people (the OpenAPI document says it)

    # Makes each member of its (value, status, when). Once the class is made, `ErrorCode(v)`
    # looks the member of value v up, as with any enum: the defaults let type checkers see
    # that call, no member is made with them (tests/unit/http/test_errorcodes.py).
    def __new__(cls, value: str, status: int = 0, when: str = "") -> ErrorCode:
        member = str.__new__(cls, value)
        member._value_ = value
        member.status = status
        member.when = when
        return member

    BAD_REQUEST = (
        "bad_request",
        400,
        "a key, parameter, cursor or body does not parse, a parameter is unknown or given "
        "twice, or the request is not HTTP the node can read (the connection closes)",
    )
    NOT_WINDOWED = "not_windowed", 400, "a windows query on a table that is not windowed"
    WINDOWED = (
        "windowed",
        400,
        "a key read, multi-get or key watch on a windowed table, where a key has a value per "
        "window: its windows are read at `GET .../keys/{key}/windows`",
    )
    UNAUTHENTICATED = "unauthenticated", 401, "credentials missing, invalid or expired"
    FORBIDDEN = (
        "forbidden",
        403,
        "the credentials do not grant the table; also for a table that does not exist, so "
        "that table names do not leak",
    )
    NOT_A_CLUSTER_NODE = (
        "not_a_cluster_node",
        403,
        "the request carries the headers nodes forward with, without a valid cluster signature",
    )
    UNKNOWN_TABLE = "unknown_table", 404, "no table of that name"
    NOT_FOUND = "not_found", 404, "the key is absent (or deleted)"
    NO_ROUTE = "no_route", 404, "no endpoint at that path"
    METHOD_NOT_ALLOWED = "method_not_allowed", 405, "the endpoint takes another method (`Allow`)"
    REQUEST_TIMEOUT = (
        "request_timeout",
        408,
        "the request's head or body did not arrive in time after its first bytes; the "
        "connection closes",
    )
    TOO_LARGE = "too_large", 413, "a key, a body or a multi-get's keys over the node's limit"
    OVERLOADED = (
        "overloaded",
        429,
        "the node is answering as many requests as it may at once; retry after `Retry-After`",
    )
    UNDECODABLE_VALUE = (
        "undecodable_value",
        500,
        "a stored value is not in the table's format (the producer's data, not the request)",
    )
    INTERNAL = "internal", 500, "a bug; the node logged the details"
    UNAVAILABLE = (
        "unavailable",
        503,
        "no replica allowed to answer could within the request's budget: the partition is "
        "restoring or moving, its owner is unreachable, or the node has not read the table "
        "catalog yet; retry after `Retry-After`, or pass `max_lag` to let a standby answer",
    )
    NOT_READY = (
        "not_ready",
        503,
        "`/readyz` before the node has joined the group and restored its active partitions",
    )
    TOO_MANY_CONNECTIONS = (
        "too_many_connections",
        503,
        "a new connection past the node's connection limit, answered before any request is "
        "read and closed; retry after `Retry-After`",
    )
    TOO_MANY_WATCHES = (
        "too_many_watches",
        503,
        "a watch past the node's `--max-watchers` open at once; retry after `Retry-After`, "
        "or on another node",
    )
    LOOP_DETECTED = (
        "loop_detected",
        508,
        "the nodes forwarded the request to each other up to the hop limit: they disagree on "
        "the owner during a rebalance; retry shortly",
    )
