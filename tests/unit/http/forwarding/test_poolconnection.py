"""Reading an owner's answers off a forwarding connection
(`sparkiq.http.forwarding.poolconnection`)."""

from __future__ import annotations

import pytest

from sparkiq.http.forwarding.poolconnection import parse_head

NODE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 95\r\n"
    b"x-request-id: 0123456789abcdef"
)


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (NODE_HEAD, (200, None, 95, False, True)),  # a node's answer: one match
        (NODE_HEAD.replace(b"200 OK", b"404 Not Found"), (404, None, 95, False, True)),
        (NODE_HEAD.replace(b" OK", b""), (200, None, 95, False, True)),  # no reason phrase
        # Slightly other shapes: read line by line, with what those lines say.
        (NODE_HEAD + b"\r\nconnection: close", (200, None, 95, False, False)),
        (NODE_HEAD + b"\r\nretry-after: 1", (200, "1", 95, False, True)),
        (NODE_HEAD.replace(b"HTTP/1.1", b"HTTP/1.0"), (200, None, 95, False, False)),
        (
            NODE_HEAD.replace(b"content-length: 95", b"Content-Length: 7"),
            (200, None, 7, False, True),
        ),
        (
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            b"retry-after: 2\r\ncontent-length: 10\r\nx-request-id: r",
            (503, "2", 10, False, True),
        ),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked", (200, None, None, True, True)),
    ],
)
def test_answer_heads_are_read_the_same_whichever_way(
    head: bytes, expected: tuple[int, str | None, int | None, bool, bool]
) -> None:
    assert parse_head(head) == expected
