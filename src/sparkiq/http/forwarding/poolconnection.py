"""One keep-alive connection of the forwarding pool (`sparkiq.http.forwarding.pool`) to an
owner node.

Requests pipelined on it are answered in order; each answer, framed by Content-Length (chunked
and close-delimited also understood), is handed to the request waiting for it as soon as it is
read. A connection that breaks fails its waiting requests, saying whether any byte of an
answer arrived (if none did, the request may be asked again elsewhere).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import deque
from collections.abc import Callable
from contextvars import Context
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

from sparkiq.http.messages.wire import ANSWER_HEAD

log = logging.getLogger("sparkiq.http.forwarding.pool")  # one logger for all of forwarding

MAX_HEAD = 64 * 1024


# Underscored though the pool imports it: the name starts the `Unreachable` messages
# ("_Broken: ...") that `metrics.forward_error` reads.
class _Broken(Exception):
    """The connection closed or sent something that is not HTTP/1.1."""

    def __init__(self, message: str, *, got_bytes: bool) -> None:
        super().__init__(message)
        self.got_bytes = got_bytes


class Expired(Exception):
    """No complete answer before the request's deadline."""


@dataclass(slots=True)
class ForwardAnswer:
    """An owner's answer as read off the connection."""

    status: int
    retry_after: str | None
    body: bytes
    keep_alive: bool


# What a waiting request is told when it settles: its answer, or why there is none.
_Notify = Callable[[ForwardAnswer | Exception], None]


@dataclass(slots=True)
class Waiting:
    """A request sent (or about to be) on a connection, waiting for its answer: `notify` is
    called as soon as the answer is read (`PoolForwarder.send` passes one that settles its
    future).

    It runs in `context`, the request's own (as a future's callback would): its request id
    and the caller's credentials, which any further forward of it carries.
    """

    notify: _Notify
    context: Context
    deadline: float  # loop.time() by which the answer must be complete

    def settle(self, outcome: ForwardAnswer | Exception) -> None:
        try:
            self.context.run(self.notify, outcome)
        except Exception:  # the connection's other requests must still be answered
            log.exception("a forwarded request's callback failed")


class ForwardConnection(asyncio.Protocol):
    """One keep-alive connection. Requests pipelined on it are answered in order, so the
    answers that arrive are handed to the waiting requests first come, first served."""

    def __init__(self, on_idle: Callable[[ForwardConnection], None]) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buf = bytearray()
        self._waiting: deque[Waiting] = deque()
        self._head: tuple[int, str | None, int | None, bool, bool] | None = None
        self._head_len = 0
        # Called when the last waiting answer arrived and the connection stays open.
        self._on_idle = on_idle
        self.out: list[bytes] = []  # requests to send at the end of this loop iteration

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but behave as one.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        try:
            while self._waiting:
                answer = self._parse(eof=False)
                if answer is None:
                    return
                self._complete(answer)
        except _Broken as exc:
            self._fail(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self._waiting:
            return
        try:
            answer = self._parse(eof=True)
        except _Broken as broken:
            self._fail(broken)
            return
        if answer is not None:
            self._complete(answer)
        self._fail(_Broken(f"connection closed: {exc}", got_bytes=bool(self._buf)))

    # -- use ---------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Requests sent (or queued) on this connection whose answers have not arrived."""
        return len(self._waiting)

    def expect(self, waiting: Waiting) -> None:
        """Be ready for the answer to a request about to be sent."""
        assert self.transport is not None
        if not self._waiting:  # bytes nobody asked for are not an answer to this request
            self._buf.clear()
            self._head = None
        self._waiting.append(waiting)

    def broken(self, message: str) -> None:
        """Fail the waiting answers: nothing was sent or received on this connection."""
        self._fail(_Broken(message, got_bytes=False))

    def expire(self, now: float) -> bool:
        """Drop the connection if an answer is past its deadline; True if it did.

        Those requests fail as expired; the others on the connection got nothing yet (or,
        the first, part of an answer) and fail as broken, to be asked again elsewhere.
        """
        if not any(w.deadline <= now for w in self._waiting):
            return False
        self._fail(_Broken("dropped with an expired request", got_bytes=bool(self._buf)), now)
        return True

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _complete(self, answer: ForwardAnswer) -> None:
        self._waiting.popleft().settle(answer)
        if not answer.keep_alive:
            self._fail(_Broken("the owner closed the connection", got_bytes=False))
        elif not self._waiting:
            self._on_idle(self)

    def _fail(self, exc: _Broken, expired_at: float | None = None) -> None:
        """Fail every waiting answer and close. `exc` goes to the first; the others got
        nothing of their answers (they may be asked again elsewhere). With `expired_at`,
        those whose deadline it passed fail as expired instead."""
        waiting, self._waiting = self._waiting, deque()
        behind = f"an earlier answer on the connection failed: {exc}"
        for w in waiting:
            late = expired_at is not None and w.deadline <= expired_at
            w.settle(Expired() if late else exc)
            exc = _Broken(behind, got_bytes=False)
        self.close()

    def _parse(self, *, eof: bool) -> ForwardAnswer | None:
        """The first complete answer in the buffer, taken out of it; None if there is none."""
        buf = self._buf
        if self._head is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    raise _Broken("response head too large", got_bytes=True)
                return None
            self._head = parse_head(bytes(buf[:end]))
            self._head_len = end + 4
        status, retry_after, length, chunked, keep_alive = self._head
        start = self._head_len
        if length is not None:
            end = start + length
            if len(buf) < end:
                return None
            body = bytes(buf[start:end])
        elif chunked:
            found = _dechunk(buf, start)
            if found is None:
                return None
            body, end = found
        elif eof:  # delimited by the end of the connection
            body, end, keep_alive = bytes(buf[start:]), len(buf), False
        else:
            return None
        del buf[:end]
        self._head = None
        return ForwardAnswer(status, retry_after, body, keep_alive)


def node_address(
    base_url: str, tls: ssl.SSLContext | None
) -> tuple[str, int, ssl.SSLContext | None]:
    """Host, port and TLS context (`tls`, else the system's; None for http) of another node's
    URL. ValueError for a URL that is not http(s)://host[:port]."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"cannot forward to {base_url!r}: only http(s)://host:port")
    context: ssl.SSLContext | None = None
    if parts.scheme == "https":
        context = tls if tls is not None else ssl.create_default_context()
    return parts.hostname, parts.port or (443 if context is not None else 80), context


def parse_head(head: bytes) -> tuple[int, str | None, int | None, bool, bool]:
    """(status, Retry-After, Content-Length, chunked, keep-alive) of an answer's head.

    The head a node writes most (`wire.ANSWER_HEAD`) is read in one match instead of line by
    line (about half the instructions, `benchmarks/bench_lane.py`)."""
    node = ANSWER_HEAD.fullmatch(head)
    if node is not None:
        return int(node[1]), None, int(node[2]), False, True
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        raise _Broken(f"not an HTTP/1.x status line: {lines[0][:80]!r}", got_bytes=True)
    try:
        status = int(parts[1])
    except ValueError:
        raise _Broken(f"bad status {parts[1][:20]!r}", got_bytes=True) from None
    keep_alive = parts[0] == b"HTTP/1.1"
    length: int | None = None
    chunked = False
    retry_after: str | None = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            keep_alive = value.strip().lower() != b"close"
        elif name == b"retry-after":
            retry_after = value.strip().decode("latin-1")
    return status, retry_after, length, chunked, keep_alive


def _dechunk(buf: bytearray, pos: int) -> tuple[bytes, int] | None:
    """A chunked body from `pos`, and where its message ends; None if it is not all here."""
    out = bytearray()
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        try:
            size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
        except ValueError:
            raise _Broken("bad chunk size", got_bytes=True) from None
        pos = eol + 2
        if size == 0:  # then trailer lines, if any, and an empty line
            end = pos + 2 if buf[pos : pos + 2] == b"\r\n" else buf.find(b"\r\n\r\n", pos) + 4
            return None if end < pos + 2 or len(buf) < end else (bytes(out), end)
        if len(buf) < pos + size + 2:
            return None
        out += buf[pos : pos + size]
        pos += size + 2
