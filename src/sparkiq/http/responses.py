"""HTTP answers as plain values, and the one place where failures become statuses.

Everything inside the HTTP layer deals in `sparkiq.queries.Failure`; `failure_response` is the
edge that maps each `FailureReason` to a status code and the one error shape
`{"error": {"code", "message"}}`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import orjson

from sparkiq.queries import Failure, FailureReason

JSON = "application/json"
JSON_HEADERS: tuple[tuple[str, str], ...] = (("content-type", JSON),)

STATUS_FOR: dict[FailureReason, int] = {
    FailureReason.UNKNOWN_TABLE: 404,
    FailureReason.NOT_FOUND: 404,
    FailureReason.BAD_REQUEST: 400,
    FailureReason.NOT_WINDOWED: 400,
    FailureReason.TOO_LARGE: 413,
    FailureReason.LOOP_DETECTED: 508,
    FailureReason.UNAVAILABLE: 503,
}


class EdgeCode(StrEnum):
    """Error codes that exist only at the HTTP edge (not query failures)."""

    NO_ROUTE = "no_route"  # 404: no such path
    METHOD_NOT_ALLOWED = "method_not_allowed"  # 405
    NOT_READY = "not_ready"  # 503 from /readyz
    UNDECODABLE = "undecodable_value"  # 500: a stored value is not in the table's format
    INTERNAL = "internal"  # 500: a bug; logged


class Outcome(StrEnum):
    """Where an answer came from; a label of the request metrics."""

    LOCAL = "local"  # this node's active replica
    STANDBY = "standby"  # this node's standby replica, within the caller's max_lag
    FORWARDED = "forwarded"  # the owner's answer, passed through
    ERROR = "error"  # no replica answered (bad input, unavailable, loop, bug)


@dataclass(slots=True)
class Response:
    """A complete HTTP answer: status, headers, body bytes. Treat it as immutable.

    Not a frozen dataclass: one is built per request, and a frozen one's __init__ (three
    object.__setattr__ calls) measured at 3x the cost of this one's.
    """

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = JSON_HEADERS


# Where an answer came from travels with it, for the metrics.
Answer = tuple[Response, Outcome]

# JSON_HEADERS as ASGI wants them (bytes); adapters send this for the common answer. A tuple:
# ASGI servers and httpx take any sequence, and a shared constant must not be mutable.
RAW_JSON_HEADERS: tuple[tuple[bytes, bytes], ...] = ((b"content-type", JSON.encode()),)


def raw_headers(headers: tuple[tuple[str, str], ...]) -> Sequence[tuple[bytes, bytes]]:
    """`headers` as latin-1 bytes pairs (ASGI)."""
    if headers is JSON_HEADERS:
        return RAW_JSON_HEADERS
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]


def json_response(payload: object, status: int = 200) -> Response:
    return Response(status, orjson.dumps(payload))


def error_response(
    status: int, code: str, message: str, headers: tuple[tuple[str, str], ...] = JSON_HEADERS
) -> Response:
    body = orjson.dumps({"error": {"code": code, "message": message}})
    return Response(status, body, headers)


def failed(failure: Failure) -> Answer:
    return failure_response(failure), Outcome.ERROR


def is_absent(response: Response) -> bool:
    """Whether `response` says a key is not in its partition: a 404 `not_found`, made here
    or passed on from the owner (not an unknown table's 404)."""
    return response.status == 404 and b'"not_found"' in response.body


def failure_response(failure: Failure) -> Response:
    status = STATUS_FOR[failure.reason]
    headers = JSON_HEADERS
    if failure.reason is FailureReason.UNAVAILABLE:
        # Whole seconds, at least 1: clients and proxies parse Retry-After as an integer.
        retry = max(1, round(failure.retry_after_s or 1))
        headers = (*JSON_HEADERS, ("retry-after", str(retry)))
    return error_response(status, failure.reason.value, failure.message, headers)


def bad_request(message: str) -> Failure:
    return Failure(FailureReason.BAD_REQUEST, message)
