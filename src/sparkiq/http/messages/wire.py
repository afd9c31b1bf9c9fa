"""The node-to-node wire format: what a forwarding node writes and what the owner answers.

Forwards are most of the traffic between nodes, and both ends read them with one pattern
instead of a general parser, which is only correct while the writer writes exactly that
shape. So both shapes live here, next to the patterns that read them:

- a forwarded request (`forward_request`, sent by `sparkiq.http.forwarding.pool`): request line,
  host, hops, budget, then the caller's credentials and request id, the cluster signature
  and a body's framing when there are any. The owner's server answers one of exactly
  `FORWARDED`'s shape (a GET without credentials or signature) without its parser;
- the answer a node writes most (`ANSWER`, written by `sparkiq.http.server.loopserver`): status
  line, JSON content type, length, request id. The pool reads a head of `ANSWER_HEAD`'s
  shape in one match.

Anything else, however slight the difference, is read by the general parser at either end,
with the same meaning. tests/unit/http/test_wire.py writes with each writer and reads with each
pattern.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from http import HTTPStatus

from sparkiq.auth.cluster import CLUSTER_HEADER
from sparkiq.http.messages.requestid import ID_PATTERN, REQUEST_ID_HEADER

# Request headers that travel between nodes.
# Header lines ("name: value\r\n"...) a forward of the current request repeats besides its id
# (`REQUEST_ID`): the caller's credentials.
FORWARD_HEADERS: ContextVar[str] = ContextVar("sparkiq_forward_headers", default="")

HOPS_HEADER = "x-sparkiq-hops"  # how many nodes forwarded this request so far
BUDGET_HEADER = "x-sparkiq-budget-ms"  # what is left of the first node's budget

_HOPS = HOPS_HEADER.encode()
_BUDGET = BUDGET_HEADER.encode()
_REQUEST_ID = REQUEST_ID_HEADER.encode()

STATUS_LINES = {s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode()) for s in HTTPStatus}


def status_line(status: int) -> bytes:
    """The status line of `status`, with its reason phrase when it has one."""
    line = STATUS_LINES.get(status)
    return line if line is not None else b"HTTP/1.1 %d \r\n" % status


# -- requests --------------------------------------------------------------------------------


def forward_request(
    method: str,
    target: str,
    authority: str,
    hops: int,
    budget_ms: int,
    extra: str,
    request_id: str | None,
    signature: str | None,
    body: bytes | None,
    /,
) -> bytes:
    """The bytes of a request forwarded to another node (`sparkiq.http.forwarding.pool` sends it).

    `hops` is the count the owner receives (this node's own hop included), `extra` header
    lines ("name: value\\r\\n"...) to repeat (the caller's credentials), `signature` the
    cluster's signature of the request (`sparkiq.auth.cluster`), `body` a JSON body.
    Positional only: a forward is on the hot path, and keywords cost more than the checks.
    """
    head = (
        f"{method} {target} HTTP/1.1\r\nhost: {authority}\r\n"
        f"{HOPS_HEADER}: {hops}\r\n{BUDGET_HEADER}: {budget_ms}\r\n{extra}"
    )
    if request_id is not None:
        head += f"{REQUEST_ID_HEADER}: {request_id}\r\n"
    if signature is not None:
        head += f"{CLUSTER_HEADER}: {signature}\r\n"
    if body is None:
        return (head + "\r\n").encode("latin-1")
    head += f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode("latin-1") + body


# A forwarded GET as `forward_request` writes it without credentials, signature or body,
# whole: groups (target, hops, budget, request id or None). The request id is matched with
# the pattern the gate accepts (`requestid.ID_PATTERN`), so the gate keeps it as sent.
FORWARDED = re.compile(
    rb"GET (/[!->@-~]*) HTTP/1\.1\r\nhost: [!-~]+\r\n"
    + _HOPS
    + rb": ([0-9]{1,6})\r\n"
    + _BUDGET
    + rb": ([0-9]{1,12})\r\n(?:"
    + _REQUEST_ID
    + b": ("
    + ID_PATTERN.encode()
    + rb")\r\n)?\r\n"
)


def forwarded_headers(
    hops: bytes | None, budget: bytes | None, request_id: bytes | None
) -> dict[bytes, bytes]:
    """The headers of a `FORWARDED` request as a parser would have kept them."""
    headers = {}
    if hops is not None:
        headers[_HOPS] = hops
    if budget is not None:
        headers[_BUDGET] = budget
    if request_id is not None:
        headers[_REQUEST_ID] = request_id
    return headers


# -- answers ---------------------------------------------------------------------------------


def answer_head(
    status: int, headers: tuple[tuple[str, str], ...], request_id: str | None, keep_alive: bool
) -> bytes:
    """The status line and header lines of an answer in any other shape than `ANSWER`, up to
    its framing (content-length or transfer-encoding) and blank line."""
    data = status_line(status)
    for name, value in headers:
        data += f"{name}: {value}\r\n".encode("latin-1")
    if request_id is not None:
        data += b"x-request-id: " + request_id.encode("latin-1") + b"\r\n"
    return data if keep_alive else data + b"connection: close\r\n"


# A JSON answer on a connection that stays open: (status line, length, request id, body).
ANSWER = b"%bcontent-type: application/json\r\ncontent-length: %d\r\nx-request-id: %b\r\n\r\n%b"
# `ANSWER` of a 200: (length, request id, body).
FOUND = ANSWER.replace(b"%b", STATUS_LINES[200], 1)

# The head of `ANSWER` without its blank line: groups (status, length).
ANSWER_HEAD = re.compile(
    rb"HTTP/1\.1 ([1-5][0-9][0-9])(?: [^\r\n]*)?\r\ncontent-type: application/json\r\n"
    rb"content-length: ([0-9]{1,12})\r\nx-request-id: [!-~]*"
)
