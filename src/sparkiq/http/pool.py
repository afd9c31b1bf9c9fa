"""A small HTTP/1.1 client with keep-alive pools, for node-to-node forwarding.

Forwarding is on the hot path of every request that lands on the wrong node, and a general
client (aiohttp) spends more time per request than the whole local answer takes. This one
only does what sparkiq nodes need from each other: requests pipelined on keep-alive
connections (answered in order), responses framed by Content-Length (chunked and
close-delimited also understood), idle connections kept per origin and reused. A request that
fails before any byte of its answer arrived is asked again on another connection: all
forwarded requests are reads.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
from collections import deque
from collections.abc import Callable
from contextvars import Context, copy_context
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

from sparkiq.auth.cluster import ClusterCredential
from sparkiq.http.forward import Unreachable
from sparkiq.http.guard import FORWARD_HEADERS
from sparkiq.http.requestid import REQUEST_ID
from sparkiq.http.responses import JSON_HEADERS, Response
from sparkiq.http.wire import ANSWER_HEAD, forward_request

log = logging.getLogger(__name__)

_MAX_HEAD = 64 * 1024


# How often in-flight requests are checked against their deadlines: a request past its
# budget is answered Unreachable up to this much late. One periodic check instead of a timer
# per request: under uvloop `asyncio.timeout()` measured ~16 us per request, a call_at and
# its cancel ~3 us, which is a sizeable share of a forwarded answer.
_SWEEP_S = 0.01


class _Broken(Exception):
    """The connection closed or sent something that is not HTTP/1.1; internal to this module."""

    def __init__(self, message: str, *, got_bytes: bool) -> None:
        super().__init__(message)
        self.got_bytes = got_bytes


class _Expired(Exception):
    """No complete answer before the request's deadline; internal to this module."""


@dataclass(slots=True)
class _Answer:
    status: int
    retry_after: str | None
    body: bytes
    keep_alive: bool


# What a waiting request is told when it settles: its answer, or why there is none.
_Notify = Callable[[_Answer | Exception], None]


@dataclass(slots=True)
class _Waiting:
    """A request sent (or about to be) on a connection, waiting for its answer: `notify` is
    called as soon as the answer is read (`send` passes one that settles its future).

    It runs in `context`, the request's own (as a future's callback would): its request id
    and the caller's credentials, which any further forward of it carries.
    """

    notify: _Notify
    context: Context
    deadline: float  # loop.time() by which the answer must be complete

    def settle(self, outcome: _Answer | Exception) -> None:
        try:
            self.context.run(self.notify, outcome)
        except Exception:  # the connection's other requests must still be answered
            log.exception("a forwarded request's callback failed")


def _settle_future(future: asyncio.Future[_Answer], outcome: _Answer | Exception) -> None:
    if future.done():  # a cancelled request's answer is dropped
        return
    if isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


class _Connection(asyncio.Protocol):
    """One keep-alive connection. Requests pipelined on it are answered in order, so the
    answers that arrive are handed to the waiting requests first come, first served."""

    def __init__(self, on_idle: Callable[[_Connection], None]) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buf = bytearray()
        self._waiting: deque[_Waiting] = deque()
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

    def expect(self, waiting: _Waiting) -> None:
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

    def _complete(self, answer: _Answer) -> None:
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
            w.settle(_Expired() if late else exc)
            exc = _Broken(behind, got_bytes=False)
        self.close()

    def _parse(self, *, eof: bool) -> _Answer | None:
        """The first complete answer in the buffer, taken out of it; None if there is none."""
        buf = self._buf
        if self._head is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    raise _Broken("response head too large", got_bytes=True)
                return None
            self._head = _parse_head(bytes(buf[:end]))
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
        return _Answer(status, retry_after, body, keep_alive)


def _response(answer: _Answer) -> Response:
    headers = JSON_HEADERS
    if answer.retry_after is not None:
        headers = (*JSON_HEADERS, ("retry-after", answer.retry_after))
    return Response(answer.status, answer.body, headers)


def _pass_on(
    on_answer: Callable[[Response | Unreachable | None], None],
    base_url: str,
    budget_s: float,
    outcome: _Answer | Exception,
) -> None:
    """Tell a `send_now` caller what became of its request."""
    if isinstance(outcome, _Answer):
        on_answer(_response(outcome))
    elif isinstance(outcome, _Broken) and not outcome.got_bytes:
        on_answer(None)  # no answer began: e.g. the owner had closed the connection
    elif isinstance(outcome, _Expired | _Broken | OSError):
        on_answer(_unreachable(base_url, budget_s, outcome))
    else:  # an error this pool does not expect
        on_answer(None)


def _unreachable(base_url: str, budget_s: float, exc: BaseException) -> Unreachable:
    if isinstance(exc, TimeoutError | _Expired):
        return Unreachable(base_url, f"no answer within {budget_s:.3f}s")
    return Unreachable(base_url, f"{type(exc).__name__}: {exc}")


def _parse_head(head: bytes) -> tuple[int, str | None, int | None, bool, bool]:
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


class _Origin:
    """Connections to one origin (host, port), over TLS when `tls` is given."""

    def __init__(self, host: str, port: int, keep: int, tls: ssl.SSLContext | None) -> None:
        self.host = host
        self.port = port
        self.authority = f"{host}:{port}"
        self.keep = keep
        self.tls = tls
        self.idle: deque[_Connection] = deque()
        # The connection this loop iteration's `send_now` requests are pipelined on.
        self.filling: _Connection | None = None

    async def connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        if self.tls is None:
            _, conn = await loop.create_connection(self._new, self.host, self.port)
        else:
            _, conn = await loop.create_connection(
                self._new, self.host, self.port, ssl=self.tls, server_hostname=self.host
            )
        return conn

    def _new(self) -> _Connection:
        return _Connection(self.release)

    def take_idle(self) -> _Connection | None:
        """The most recently used open idle connection (the least likely to have timed out)."""
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed:
                return conn
        return None

    def release(self, conn: _Connection) -> None:
        """Keep `conn`, whose answers have all arrived, for the next requests (or close it)."""
        if conn.closed or conn is self.filling:
            return
        if len(self.idle) < self.keep:
            self.idle.append(conn)
        else:
            conn.close()


class PoolForwarder:
    """`Forwarder` over raw keep-alive HTTP/1.1 connections, pooled per owner URL.

    Every request carries the current request's id (`REQUEST_ID`) and caller credentials
    (`guard.FORWARD_HEADERS`) and, when the cluster has a credential, its signature.
    https:// owners are reached over TLS, verified against `ssl_context` (default: the
    system's trust store).

    `send_now` pipelines: the single-key GETs of one loop iteration to one owner share a
    connection, up to `forward_pipeline_depth` of them, and leave in one write; the owner reads them
    in one go and answers them in one write. On loopback the system calls are most of a
    forward's cost, and this saves all but one pair per batch on both nodes. The price: an
    answer the owner holds back (a partition it is restoring) holds back the ones behind it
    on that connection, within the request budget. `send` (multi-gets, range pages, the
    read loop) takes a connection of its own.
    """

    def __init__(
        self,
        pool_per_host: int = 64,
        *,
        pipeline_depth: int = 16,
        cluster: ClusterCredential | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if pipeline_depth < 1:
            raise ValueError(f"pipeline_depth must be >= 1, got {pipeline_depth}")
        self._keep = pool_per_host
        self._depth = pipeline_depth
        self._cluster = cluster
        self._ssl = ssl_context
        self._origins: dict[str, _Origin] = {}
        self._busy: set[_Connection] = set()  # awaiting answers, checked by `_sweep`
        # Connections with requests of this loop iteration, written at its end (`_send_all`).
        self._sending: list[tuple[_Connection, _Origin]] = []
        self._sweeping = False

    def _origin(self, base_url: str) -> _Origin:
        origin = self._origins.get(base_url)
        if origin is None:
            parts = urlsplit(base_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"cannot forward to {base_url!r}: only http(s)://host:port")
            tls: ssl.SSLContext | None = None
            if parts.scheme == "https":
                tls = self._ssl if self._ssl is not None else ssl.create_default_context()
            default_port = 443 if tls is not None else 80
            origin = _Origin(parts.hostname, parts.port or default_port, self._keep, tls)
            self._origins[base_url] = origin
        return origin

    async def send(
        self,
        base_url: str,
        method: str,
        target: str,
        body: bytes | None,
        *,
        hops: int,
        budget_s: float,
    ) -> Response | Unreachable:
        try:
            origin = self._origin(base_url)
        except ValueError as exc:
            return Unreachable(base_url, str(exc))
        request = self._request(origin, method, target, body, hops, budget_s)
        deadline = asyncio.get_running_loop().time() + budget_s
        try:
            answer = await self._exchange(origin, request, deadline)
        except (TimeoutError, _Expired, OSError, _Broken) as exc:
            return _unreachable(base_url, budget_s, exc)
        return _response(answer)

    def send_now(
        self,
        base_url: str,
        target: str,
        *,
        hops: int,
        budget_s: float,
        on_answer: Callable[[Response | Unreachable | None], None],
    ) -> bool:
        """`send` of a GET on a pooled connection, answered through a callback (no task);
        False if there is none to take (then use `send`)."""
        origin = self._origins.get(base_url)
        if origin is None:
            return False
        conn = origin.filling
        if conn is None or conn.closed or conn.in_flight >= self._depth:
            conn = origin.take_idle()
            if conn is None:
                return False
            origin.filling = conn
        # `_request`, written out (every forward's path): one call less.
        signature = None if self._cluster is None else self._cluster.sign("GET", target, hops + 1)
        request = forward_request(
            "GET",
            target,
            origin.authority,
            hops + 1,
            max(1, int(budget_s * 1000)),
            FORWARD_HEADERS.get(),
            REQUEST_ID.get(),
            signature,
            None,
        )
        # Called from the connection as the answer is read: no future, no extra loop turn.
        # (A partial, not a closure: cheaper to make and to drop, at every request.)
        done = functools.partial(_pass_on, on_answer, base_url, budget_s)
        deadline = asyncio.get_running_loop().time() + budget_s
        self._begin(conn, origin, request, _Waiting(done, copy_context(), deadline))
        return True

    def _request(
        self,
        origin: _Origin,
        method: str,
        target: str,
        body: bytes | None,
        hops: int,
        budget_s: float,
    ) -> bytes:
        signature = None
        if self._cluster is not None:
            signature = self._cluster.sign(method, target, hops + 1)
        return forward_request(
            method,
            target,
            origin.authority,
            hops + 1,
            max(1, int(budget_s * 1000)),
            FORWARD_HEADERS.get(),
            REQUEST_ID.get(),
            signature,
            body,
        )

    async def _exchange(self, origin: _Origin, request: bytes, deadline: float) -> _Answer:
        while (conn := origin.take_idle()) is not None:
            try:
                return await self._begin_future(conn, origin, request, deadline)
            except _Broken as exc:
                if exc.got_bytes:
                    raise
                continue  # the owner closed an idle connection: take another one
        async with asyncio.timeout_at(deadline):
            conn = await origin.connect()
        return await self._begin_future(conn, origin, request, deadline)

    def _begin_future(
        self, conn: _Connection, origin: _Origin, request: bytes, deadline: float
    ) -> asyncio.Future[_Answer]:
        """`_begin` with a future for the answer.

        A request whose caller gives up (cancelled) leaves its connection as it is: its answer
        is dropped when it arrives, and the connection goes back to the pool after it.
        """
        future: asyncio.Future[_Answer] = asyncio.get_running_loop().create_future()
        notify = functools.partial(_settle_future, future)
        self._begin(conn, origin, request, _Waiting(notify, copy_context(), deadline))
        return future

    def _begin(self, conn: _Connection, origin: _Origin, request: bytes, waiting: _Waiting) -> None:
        """Send `request` on `conn` at the end of this loop iteration; `waiting` gets the answer."""
        loop = asyncio.get_running_loop()
        self._busy.add(conn)
        if not self._sweeping:
            self._sweeping = True
            loop.call_later(_SWEEP_S, self._sweep)
        conn.expect(waiting)
        if not self._sending:
            loop.call_soon(self._send_all)
        if not conn.out:
            self._sending.append((conn, origin))
        conn.out.append(request)

    def _send_all(self) -> None:
        """Write the requests of this loop iteration, each connection's in one write."""
        sending, self._sending = self._sending, []
        for conn, origin in sending:
            out, conn.out = conn.out, []
            if origin.filling is conn:
                origin.filling = None
                if not conn.in_flight:  # answered already (an error, or closed)
                    origin.release(conn)
            if conn.transport is not None and not conn.closed:
                conn.transport.write(out[0] if len(out) == 1 else b"".join(out))
            else:  # closed by the owner before the requests left: try another connection
                conn.broken("connection closed before the request was sent")

    def _sweep(self) -> None:
        """Expire the requests past their deadline; runs every _SWEEP_S while any is out."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        for conn in list(self._busy):
            if conn.closed or not conn.in_flight or conn.expire(now):
                self._busy.discard(conn)
        if self._busy:
            loop.call_later(_SWEEP_S, self._sweep)
        else:
            self._sweeping = False

    async def close(self) -> None:
        for origin in self._origins.values():
            while origin.idle:
                origin.idle.pop().close()
        self._origins.clear()
        await asyncio.sleep(0)
