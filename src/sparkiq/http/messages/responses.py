"""HTTP answers as plain values, and the one place where failures become statuses.

Everything inside the HTTP layer deals in `sparkiq.core.queries.Failure`; `failure_response` is the
edge that maps each `FailureReason` to its `ErrorCode` (which has the status) and the one
error shape `{"error": {"code", "message"}}`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import orjson

from sparkiq.auth import Identity
from sparkiq.core.queries import Failure, FailureReason
from sparkiq.http.messages.errorcodes import ErrorCode

JSON = "application/json"
JSON_HEADERS: tuple[tuple[str, str], ...] = (("content-type", JSON),)

# Each query failure is answered with the code of its name, and so with that code's status
# (a KeyError here, at import, if a reason has no code).
_CODES = {code.value: code for code in ErrorCode}
CODE_FOR: dict[FailureReason, ErrorCode] = {
    reason: _CODES[reason.value] for reason in FailureReason
}
# How an absent key's 404 says so, whoever made it.
_NOT_FOUND_JSON = b'"%s"' % ErrorCode.NOT_FOUND.value.encode()


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
    status: int, code: ErrorCode, message: str, headers: tuple[tuple[str, str], ...] = JSON_HEADERS
) -> Response:
    """An answer in the one error shape; `status` is `code.status`
    (tests/unit/http/test_errorcodes.py checks every call)."""
    body = orjson.dumps({"error": {"code": code, "message": message}})
    return Response(status, body, headers)


def failed(failure: Failure) -> Answer:
    return failure_response(failure), Outcome.ERROR


def is_absent(response: Response) -> bool:
    """Whether `response` says a key is not in its partition: a 404 `not_found`, made here
    or passed on from the owner (not an unknown table's 404)."""
    return response.status == 404 and _NOT_FOUND_JSON in response.body


def failure_response(failure: Failure) -> Response:
    code = CODE_FOR[failure.reason]
    headers = JSON_HEADERS
    if failure.reason is FailureReason.UNAVAILABLE:
        # Whole seconds, at least 1: clients and proxies parse Retry-After as an integer.
        retry = max(1, round(failure.retry_after_s or 1))
        headers = (*JSON_HEADERS, ("retry-after", str(retry)))
    return error_response(code.status, code, failure.message, headers)


def bad_request(message: str) -> Failure:
    return Failure(FailureReason.BAD_REQUEST, message)


def error_message(response: Response) -> str:
    """The message of an error answer in sparkiq's shape (another node's), or ""."""
    try:
        doc = orjson.loads(response.body)
    except orjson.JSONDecodeError:
        return ""
    error = doc.get("error") if isinstance(doc, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) else ""


def forbidden(identity: Identity, table: str) -> Response:
    """403: `identity` may not read `table` (whether or not the table exists)."""
    return error_response(
        403, ErrorCode.FORBIDDEN, f"{identity.subject!r} may not read table {table!r}"
    )
