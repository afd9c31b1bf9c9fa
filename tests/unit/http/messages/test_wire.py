"""The node-to-node wire format (`sparkiq.http.messages.wire`): what each end writes, the
other reads.

Both ends read the common shapes with one pattern instead of a parser: were a writer and its
pattern to drift apart, requests and answers would still be read (by the parser), only
slower, so nothing else would notice. These tests write with the real writers (the pool's
request, the server's answer) and read with the patterns and with a general parser.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httptools
import pytest

from sparkiq.auth.cluster import ClusterCredential
from sparkiq.http.forwarding.pool import PoolForwarder, _Origin
from sparkiq.http.forwarding.poolconnection import parse_head
from sparkiq.http.messages.requestid import REQUEST_ID
from sparkiq.http.messages.wire import (
    ANSWER,
    ANSWER_HEAD,
    FORWARD_HEADERS,
    FORWARDED,
    FOUND,
    forward_request,
    forwarded_headers,
    status_line,
)

TARGET = "/v1/tables/users/keys/a%2Fb"


def forward_get(target: str, request_id: str | None = None) -> bytes:
    return forward_request("GET", target, "test", 1, 400, "", request_id, None, None)


def pool_request(
    target: str, request_id: str | None, pool: PoolForwarder, body: bytes | None = None
) -> bytes:
    token = REQUEST_ID.set(request_id)
    try:
        method = "GET" if body is None else "POST"
        origin = _Origin("127.0.0.1", 8080, 1, None)
        return pool._request(origin, method, target, body, 0, 0.4)
    finally:
        REQUEST_ID.reset(token)


@dataclass
class Parsed:
    """A request as a general parser (httptools) reads it."""

    url: bytes = b""
    headers: dict[bytes, bytes] = field(default_factory=dict)
    body: bytes = b""
    complete: bool = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


def parsed(request: bytes) -> tuple[Parsed, str]:
    found = Parsed()
    parser = httptools.HttpRequestParser(found)
    parser.feed_data(request)
    return found, parser.get_method().decode()


def test_a_forwarded_get_is_read_by_the_node_lane_as_the_parser_reads_it() -> None:
    for rid in ("0123456789abcdef", None):
        request = pool_request(TARGET, rid, PoolForwarder())
        match = FORWARDED.fullmatch(request)
        assert match is not None
        assert match.groups() == (TARGET.encode(), b"1", b"400", rid and rid.encode())
        found, method = parsed(request)
        assert (found.complete, method, found.url) == (True, "GET", TARGET.encode())
        # What the lane passes on is what the parser would have kept of the headers read.
        lane = forwarded_headers(*match.groups()[1:])
        assert lane == {k: v for k, v in found.headers.items() if k != b"host"}


def test_requests_of_other_shapes_go_to_the_parser_with_their_meaning_kept() -> None:
    # With credentials or a cluster signature the parser reads it (the gate checks them).
    token = FORWARD_HEADERS.set("authorization: Bearer t\r\n")
    try:
        with_credentials = pool_request(TARGET, "r1", PoolForwarder())
    finally:
        FORWARD_HEADERS.reset(token)
    assert FORWARDED.fullmatch(with_credentials) is None
    assert parsed(with_credentials)[0].headers[b"authorization"] == b"Bearer t"
    credential = ClusterCredential(b"s" * 32)
    signed = pool_request(TARGET, "r1", PoolForwarder(cluster=credential))
    assert FORWARDED.fullmatch(signed) is None
    signature = parsed(signed)[0].headers[b"x-sparkiq-cluster"].decode()
    assert credential.verify(signature, "GET", TARGET, "1")
    # A body (multi-get) is framed for the parser.
    posted = pool_request("/v1/tables/users/multi-get", "r1", PoolForwarder(), b'{"keys":[]}')
    assert FORWARDED.fullmatch(posted) is None
    found, method = parsed(posted)
    assert (method, found.body, found.complete) == ("POST", b'{"keys":[]}', True)
    # Nor does the lane take a query, another method, a header more or a bad request id.
    plain = forward_get("/healthz", "r1")
    assert FORWARDED.fullmatch(plain) is not None
    for request in (
        forward_get("/v1/tables/users/range?limit=2"),
        plain.replace(b"GET", b"HEAD"),
        plain.replace(b"\r\n\r\n", b"\r\naccept: */*\r\n\r\n"),
        forward_get("/healthz", "bad id!"),
    ):
        assert FORWARDED.fullmatch(request) is None, request
        assert parsed(request)[0].complete


@pytest.mark.parametrize("status", [200, 404, 503, 599])
def test_the_answer_a_node_writes_most_is_read_in_one_match(status: int) -> None:
    written = ANSWER % (status_line(status), 12, b"0123456789abcdef", b"{}" * 6)
    head = written[: written.index(b"\r\n\r\n")]
    assert ANSWER_HEAD.fullmatch(head) is not None
    assert parse_head(head) == (status, None, 12, False, True)
    assert written.endswith(b"\r\n\r\n" + b"{}" * 6)
    found = FOUND % (2, b"r", b"{}")
    assert found == ANSWER % (status_line(200), 2, b"r", b"{}")
    assert found.startswith(b"HTTP/1.1 200 OK\r\n")
