"""The plain lane of the loop server (`sparkiq.http.server.loopserver`): a read that is exactly one
plain GET, answered without the parser.

Most lookups arrive as one read holding one `GET <path> HTTP/1.1` whose headers are only of
the kind nothing in the node reads (Host, User-Agent, Accept...). A read with anything else
-- another method or version, a query, more or less than one whole request, a header that
frames the message, changes the connection or is read by the app (`App.read_headers`) --
takes the parser's way.
"""

from __future__ import annotations

import re

# A target the lane may take is printable ASCII without
# spaces or a query (a query goes to the generic path, which reads it): this table maps
# every other byte to 0. (A table is quicker than `translate(None, delete)`, which builds
# one from `delete` at every call.)
_TARGET_CHECK = bytes(c if 0x21 <= c < 0x7F and c != ord("?") else 0 for c in range(256))
# Header names that send a request the parser's way besides those the app reads
# (`App.read_headers`): framing and connection handling.
_FRAMING_HEADERS = ("content-length", "transfer-encoding", "connection", "expect", "upgrade")


def not_plain(read_headers: tuple[str, ...]) -> re.Pattern[bytes]:
    """What `plain_get` looks for in a lower-cased header block: a header line whose name is
    one of the framing headers or of `read_headers` (or merely starts with one: only ever a
    needless detour)."""
    names = (*_FRAMING_HEADERS, *read_headers)
    return re.compile(b"(?:^|\n)(?:" + b"|".join(re.escape(h.encode()) for h in names) + b")")


def plain_get(
    data: bytes, not_plain: re.Pattern[bytes], known_head: bytes | None = None
) -> tuple[bytes, bytes] | None:
    """The target and the header block of `data` if it is exactly one plain GET the lane may
    answer (no header `not_plain` finds), else None.

    The header block is what follows the request line's CRLF, through the blank line.
    `known_head` is one the caller found plain before: the same bytes again are not looked
    through again. A client sends the same headers with every request of a connection, and
    looking through them (a regular expression, ~6k instructions) cost more than the rest of
    the lane's checks together (`benchmarks/bench_lane.py`).
    """
    line, _, head = data.partition(b"\r\n")
    if head != known_head and (
        # Exactly one whole request: its only blank line is at the end.
        (b"\r\n" + head).find(b"\r\n\r\n") != len(head) - 2
        # From here on every header line starts after a "\n"; lower-cased.
        or not_plain.search(head.lower()) is not None
    ):
        return None
    if line[:5] != b"GET /" or line[-9:] != b" HTTP/1.1":
        return None
    target = line[4:-9]
    return (target, head) if target.translate(_TARGET_CHECK).find(0) < 0 else None
