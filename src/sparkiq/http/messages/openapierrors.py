"""The error answers of the OpenAPI document (`sparkiq.http.messages.openapi`): which codes each
carries, what its description says, and the headers it always has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkiq.http.messages import models
from sparkiq.http.messages.errorcodes import ErrorCode
from sparkiq.http.settings import HttpSettings

JsonObject = dict[str, Any]

SCHEMAS = "#/components/schemas/{model}"


def ref(name: str) -> JsonObject:
    return {"$ref": SCHEMAS.format(model=name)}


def request_id_echo() -> JsonObject:
    return {"x-request-id": {"$ref": "#/components/headers/RequestId"}}


@dataclass(frozen=True)
class ErrorSpec:
    """An error answer: its status, the codes it may carry, what its description says
    besides theirs (`{s.<setting>}`: this node's), and the headers it always has."""

    status: int
    codes: tuple[ErrorCode, ...]
    note: str = ""
    headers: tuple[str, ...] = ()


_E = ErrorCode
ERRORS = {
    "BadRequest": ErrorSpec(400, (_E.BAD_REQUEST, _E.NOT_WINDOWED, _E.WINDOWED)),
    "Unauthenticated": ErrorSpec(401, (_E.UNAUTHENTICATED,), headers=("WWW-Authenticate",)),
    "Forbidden": ErrorSpec(403, (_E.FORBIDDEN, _E.NOT_A_CLUSTER_NODE)),
    "NotFound": ErrorSpec(404, (_E.UNKNOWN_TABLE, _E.NOT_FOUND, _E.NO_ROUTE)),
    "MethodNotAllowed": ErrorSpec(
        405,
        (_E.METHOD_NOT_ALLOWED,),
        "Any path described here, with a method not described for it.",
        ("Allow",),
    ),
    "RequestTimeout": ErrorSpec(408, (_E.REQUEST_TIMEOUT,)),
    "TooLarge": ErrorSpec(
        413,
        (_E.TOO_LARGE,),
        "A key over {s.max_key_bytes} bytes, a body over {s.max_body_bytes} bytes or over "
        "{s.max_multi_get_keys} keys.",
    ),
    "Overloaded": ErrorSpec(429, (_E.OVERLOADED,), headers=("Retry-After",)),
    "InternalError": ErrorSpec(500, (_E.UNDECODABLE_VALUE, _E.INTERNAL)),
    "Unavailable": ErrorSpec(
        503, (_E.UNAVAILABLE, _E.TOO_MANY_CONNECTIONS), headers=("Retry-After",)
    ),
    "WatchUnavailable": ErrorSpec(
        503,
        (_E.UNAVAILABLE, _E.TOO_MANY_WATCHES, _E.TOO_MANY_CONNECTIONS),
        "Past the node's {s.max_watchers} open watches, or while it has not read the table "
        "catalog.",
        ("Retry-After",),
    ),
    "NotReady": ErrorSpec(503, (_E.NOT_READY, _E.TOO_MANY_CONNECTIONS), headers=("Retry-After",)),
    "ConnectionLimit": ErrorSpec(503, (_E.TOO_MANY_CONNECTIONS,), headers=("Retry-After",)),
    "LoopDetected": ErrorSpec(508, (_E.LOOP_DETECTED,)),
}

HEADERS: JsonObject = {
    "Retry-After": {
        "description": "Seconds to wait before asking again.",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    },
    "WWW-Authenticate": {
        "description": "The challenge of a 401: `Bearer`.",
        "required": True,
        "schema": {"type": "string", "pattern": "^Bearer"},
    },
    "Allow": {
        "description": "The method the endpoint takes.",
        "required": True,
        "schema": {"type": "string"},
    },
}


def error_answer(error: ErrorSpec, s: HttpSettings) -> JsonObject:
    """The response object of `error`: the error shape with its codes only."""
    lines = [f"- `{code.value}`: {code.when}." for code in error.codes]
    note = error.note.format(s=s)  # this node's limits
    headers = request_id_echo()
    for name in error.headers:
        headers[name] = {"$ref": f"#/components/headers/{header_component(name)}"}
    codes = {"enum": [code.value for code in error.codes]}
    return {
        "description": "\n\n".join([*([note] if note else []), "\n".join(lines)]),
        "headers": headers,
        "content": {
            "application/json": {
                "schema": {
                    "allOf": [ref(models.ErrorAnswer.__name__)],
                    "properties": {"error": {"properties": {"code": codes}}},
                }
            }
        },
    }


def header_component(name: str) -> str:
    """The component name of header `name` ("Retry-After" -> "RetryAfter")."""
    return name.title().replace("-", "")
