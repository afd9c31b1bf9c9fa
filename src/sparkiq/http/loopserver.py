"""HTTP/1.1 on the node's own event loop: asyncio protocols with httptools' parser.

Why (BENCHMARKS.md, "HTTP lookups"): a server that does its HTTP work in a thread of its own
(granian, which carried the API before) hands every request to the Python thread and back;
on two cores that hand-over costs more CPU than the lookup. Here one thread does everything:
the loop reads the socket, httptools (the llhttp parser, in C) calls back with the URL and
headers, and a single-key GET whose partition is local is answered before `data_received`
returns -- no task, no thread switch.
Whatever needs to wait (a forward, a replica still restoring, the generic dispatch) runs in a
task of its own, and the connection answers its requests in the order they came (HTTP/1.1
pipelining).

What a connection does:
- keep-alive as HTTP/1.1 says (`Connection: close`, HTTP/1.0 without keep-alive: close after
  the answer); a connection that sends nothing is closed after `header_timeout_s`, one idle
  between requests after `idle_timeout_s`, and a request whose head or body has not arrived
  within `request_timeout_s` gets 408 and the connection closes (one sweep checks them all,
  a few times per shortest timeout: nothing is timed per request);
- the raw request target is kept as sent, so keys may hold any character ("%2F" included);
- a body over `HttpSettings.max_body_bytes` (declared or counted) gets 413 and the connection
  closes; a request httptools cannot parse gets 400 and the connection closes;
- reading pauses while the transport's write buffer is full or too many requests wait.

Past `max_connections` open connections, a new one is answered 503 (`too_many_connections`,
with Retry-After) and closed as it is accepted: its client fails at once instead of waiting
in the listen queue, and the node's descriptors stay bounded (`LoopServer.refuse`). Counting
happens when a connection opens and closes, never per request. With TLS a connection counts
once its handshake is done; the handshake itself must end within `header_timeout_s`.

The plain lane: most lookups arrive as one read holding one `GET <path> HTTP/1.1` whose headers
are only of the kind nothing here reads (Host, User-Agent, Accept...). Such a read is
answered by `_answer_plain` without the parser, its callbacks and the header bookkeeping
(`benchmarks/bench_lane.py` counts what a lookup costs either way). A read with anything
else -- another method or version, a query, more or less than one whole request, a header
that frames the message, changes the connection or is read by the node (`_LANE_HEADERS`)
-- takes the parser's way. Both ways give the same answers (tests/test_http_loopserver.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
import time
from collections import deque
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import cast

import httptools
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sparkiq.auth import Identity
from sparkiq.auth.apikeys import API_KEY_HEADER
from sparkiq.auth.cluster import CLUSTER_HEADER
from sparkiq.http.api import HttpApi
from sparkiq.http.keyread import Pending
from sparkiq.http.requestid import ID_PATTERN, REQUEST_ID, REQUEST_ID_HEADER
from sparkiq.http.responses import JSON_HEADERS, Response, error_response
from sparkiq.http.settings import (
    BUDGET_HEADER,
    HOPS_HEADER,
    connection_limit,
    default_max_connections,
    open_file_limit,
)

log = logging.getLogger(__name__)

# Requests parsed but not yet answered on one connection before it stops reading.
_MAX_QUEUED = 64
_STATUS_LINES = {s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode()) for s in HTTPStatus}
_JSON_ANSWER = (
    b"%bcontent-type: application/json\r\ncontent-length: %d\r\nx-request-id: %b\r\n\r\n%b"
)
_FOUND = _JSON_ANSWER.replace(b"%b", _STATUS_LINES[200], 1)
_HOPS = HOPS_HEADER.encode()
_BUDGET = BUDGET_HEADER.encode()
_API_KEY = API_KEY_HEADER.encode()
_CLUSTER = CLUSTER_HEADER.encode()
_REQUEST_ID = REQUEST_ID_HEADER.encode()
_INTERNAL = error_response(500, "internal", "internal error; the node logged the details")
# Refused connections are logged at most once per this many seconds.
_REFUSAL_LOG_EVERY_S = 10.0

# The plain lane (module docstring). A target the lane may take is printable ASCII without
# spaces or a query (a query goes to the generic path, which reads it): this table maps
# every other byte to 0. (A table is quicker than `translate(None, delete)`, which builds
# one from `delete` at every call.)
_TARGET_CHECK = bytes(c if 0x21 <= c < 0x7F and c != ord("?") else 0 for c in range(256))
# Header names that send a request the parser's way: framing and connection handling, and
# every header the gate, the key path or the generic path reads. A name that merely starts
# with one of them does too (only ever a needless detour).
_LANE_HEADERS = (
    "content-length",
    "transfer-encoding",
    "connection",
    "expect",
    "upgrade",
    "authorization",
    API_KEY_HEADER,
    REQUEST_ID_HEADER,
    HOPS_HEADER,
    BUDGET_HEADER,
    CLUSTER_HEADER,
)
_NOT_PLAIN = re.compile(
    b"(?:^|\n)(?:" + b"|".join(re.escape(h.encode()) for h in _LANE_HEADERS) + b")"
)

# The node lane: the GETs another node's pool forwards (`pool.PoolForwarder._request`), one
# or several pipelined in one read, each exactly in the shape the pool writes when neither
# caller credentials nor a cluster signature go with it: host, hops, budget and (mostly)
# request id, lower-case, in that order. They are answered without the parser, as the
# plain lane answers a client's GET; anything else, however slight the difference, takes
# the parser's way with the same meaning. The request id is matched with the pattern the
# gate accepts (`requestid.ID_PATTERN`), so the gate keeps it as sent.
_FORWARDED = re.compile(
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

# After a request the lane declined, the connection's next requests go straight to the parser:
# a client whose requests carry headers the lane leaves alone (a credential, or a node's
# forwarding headers) would otherwise pay for the lane's look at every one of them (~8k
# instructions; `benchmarks/bench_lane.py`). It tries the lane again after this many.
_LANE_SKIPS = 16


def plain_get(data: bytes, known_head: bytes | None = None) -> tuple[bytes, bytes] | None:
    """The target and the header block of `data` if it is exactly one plain GET the lane may
    answer, else None.

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
        or _NOT_PLAIN.search(head.lower()) is not None
    ):
        return None
    if line[:5] != b"GET /" or line[-9:] != b" HTTP/1.1":
        return None
    target = line[4:-9]
    return (target, head) if target.translate(_TARGET_CHECK).find(0) < 0 else None


class _Forward:
    """What `_Connection._task` holds while the owner is asked with callbacks
    (`KeyPath.forward_now`): nothing to cancel, the callbacks see the connection closing."""

    __slots__ = ()

    def cancel(self) -> None:
        pass


_FORWARD = _Forward()


@dataclass(slots=True)
class _Request:
    """A parsed request waiting behind another on its connection (pipelining)."""

    target: bytes
    method: str
    headers: dict[bytes, bytes]
    body: list[bytes]
    too_large: bool
    keep_alive: bool


class _Connection(asyncio.Protocol):
    """One client connection: parse, answer in order, keep alive.

    The request being parsed lives in the connection's own fields (`_target`, `_headers`,
    `_body`, `_too_large`); a `_Request` is made only for one that has to wait its turn.
    Header names are kept as lower-case bytes and values as bytes; they are decoded only
    when read.
    """

    def __init__(self, server: LoopServer) -> None:
        self._server = server
        self._api = server.api
        self._keys = server.api.keys
        self._gate = server.api.gate
        self._max_body = server.api.settings.max_body_bytes
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._target = b""
        self._headers: dict[bytes, bytes] = {}
        self._body: list[bytes] = []
        self._body_size = 0
        self._too_large = False
        self._in_message = False  # the parser has begun a request it has not completed
        self._plain_head: bytes | None = None  # the header block last found plain (`plain_get`)
        self._lane_skips = 0  # requests still to take the parser's way without trying the lane
        self._from_node = False  # the last read was of the node lane (`_answer_forwards`)
        self._queue: deque[_Request] = deque()  # parsed, waiting for the one in `_task`
        # The answer being awaited (a task, or `_FORWARD`: the owner's, to `_forward_answered`),
        # and how to send it.
        self._task: asyncio.Future[Response] | _Forward | None = None
        self._task_keep_alive = True
        self._task_head = False
        self._closing = False
        self._out: list[bytes] = []  # answers written since the last flush
        self._paused_reading = False
        self._paused_writing = False
        # When the connection last read or sent anything; `opened` until it does.
        self.last_active = self.opened = time.monotonic()
        self.started: float | None = None  # when the request being received began

    # -- transport callbacks -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, but have its methods.
        self._transport = cast(asyncio.Transport, transport)
        server = self._server
        if len(server.connections) >= server.max_connections:
            self._closing = True
            server.refuse(self._transport)
            return
        server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._closing = True
        self._queue.clear()
        if self._task is not None:
            self._task.cancel()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        # A request a lane answers is activity when its answer is sent (`flush`).
        if self._from_node and not self._in_message:
            # A node's connection stays one: its reads go to the node lane first.
            if self._answer_forwards(data):
                return
            self._from_node = False
        elif not self._in_message and self._task is None and not self._queue:
            if self._lane_skips:
                self._lane_skips -= 1
            elif (plain := plain_get(data, self._plain_head)) is not None:
                target, self._plain_head = plain
                self._answer_plain(target)
                return
            elif self._answer_forwards(data):
                self._from_node = True
                return
            else:
                self._lane_skips = _LANE_SKIPS
        now = self.last_active = time.monotonic()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(400, "protocol upgrades are not supported")
        except httptools.HttpParserError as exc:
            self._refuse(400, f"malformed HTTP request: {exc}")
        # A request begun and not complete is timed from its first bytes.
        if not self._in_message:
            self.started = None
        elif self.started is None:
            self.started = now

    def pause_writing(self) -> None:
        self._paused_writing = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self._paused_writing = False
        self._maybe_resume_reading()

    # -- parser callbacks --------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._in_message = True

    def on_url(self, url: bytes) -> None:
        self._target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.lower()
        headers = self._headers
        # Repeated headers are joined as RFC 9110 allows for list-valued fields.
        headers[key] = headers[key] + b", " + value if key in headers else value

    def on_headers_complete(self) -> None:
        headers = self._headers
        if b"content-length" in headers or b"expect" in headers:
            self._before_body(headers)

    def _before_body(self, headers: dict[bytes, bytes]) -> None:
        """413 at once for a body declared too large; 100 Continue to a client that waits."""
        idle = self._task is None and not self._queue and self._transport is not None
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self._max_body:
            self._too_large = True
            if idle:  # say so before the body is sent
                self._write(self._api.body_too_large(), keep_alive=False, with_id=False)
        elif idle and headers.get(b"expect", b"").lower() == b"100-continue":
            assert self._transport is not None
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._too_large:
            return
        self._body_size += len(body)
        if self._body_size > self._max_body:
            self._too_large = True
            self._body = []
        else:
            self._body.append(body)

    def on_message_complete(self) -> None:
        parser = self._parser
        target, headers, body, too_large = self._target, self._headers, self._body, self._too_large
        self._target, self._headers, self._body, self._too_large = b"", {}, [], False
        self._body_size = 0
        self._in_message = False
        if self._closing:
            return
        method = parser.get_method().decode("ascii")
        keep_alive = parser.should_keep_alive()
        if self._task is not None or self._queue:
            self._queue.append(_Request(target, method, headers, body, too_large, keep_alive))
            if len(self._queue) >= _MAX_QUEUED:
                self._pause_reading()
            return
        self._answer(target, method, headers, body, too_large, keep_alive)

    # -- answering ---------------------------------------------------------------------------

    def _answer(
        self,
        target: bytes,
        method: str,
        headers: dict[bytes, bytes],
        body: list[bytes],
        too_large: bool,
        keep_alive: bool,
    ) -> None:
        """Answer a request now if it can be, else start the task that will."""
        if too_large:
            self._write(self._api.body_too_large(), keep_alive=False, with_id=False)
            return
        try:
            # Header values are decoded only when present (most requests carry none of these).
            get = headers.get
            hops = get(_HOPS)
            authorization = get(b"authorization")
            api_key = get(_API_KEY)
            request_id = get(_REQUEST_ID)
            signature = get(_CLUSTER)
            path, _, query = target.partition(b"?")
            admitted = self._gate.admit(
                method,
                path.decode("latin-1"),
                target.decode("latin-1"),
                authorization=None if authorization is None else authorization.decode("latin-1"),
                api_key=None if api_key is None else api_key.decode("latin-1"),
                request_id=None if request_id is None else request_id.decode("latin-1"),
                hops=None if hops is None else hops.decode("latin-1"),
                signature=None if signature is None else signature.decode("latin-1"),
            )
            if isinstance(admitted, Response):
                self._write(admitted, keep_alive=keep_alive, head=method == "HEAD")
                return
            self._dispatch(path, query, method, headers, body, keep_alive, admitted)
        except Exception as exc:  # the API answers its own errors; this is a last resort
            self._internal_error(exc)

    def _answer_plain(
        self,
        path: bytes,
        hops: bytes | None = None,
        budget: bytes | None = None,
        request_id: bytes | None = None,
    ) -> None:
        """`_answer` for a request of the plain lane: a GET of `path` (no query) without any
        header the gate or the API reads, on a connection that keeps alive; or of the node
        lane: the same with a node's forwarding headers (`hops`, `budget`, `request_id`)."""
        try:
            text = path.decode("latin-1")
            if hops is None:
                admitted = self._gate.admit_plain(text)
            else:
                rid = None if request_id is None else request_id.decode("latin-1")
                admitted = self._gate.admit_plain(text, hops.decode("latin-1"), rid)
            if isinstance(admitted, Response):
                self._write(admitted, keep_alive=True)
                return
            if not self._answer_key(path, hops, budget, admitted, True):
                headers = _node_headers(hops, budget, request_id)
                self._generic(path, b"", "GET", headers, [], True, admitted)
        except Exception as exc:  # the API answers its own errors; this is a last resort
            self._internal_error(exc)

    def _answer_forwards(self, data: bytes) -> bool:
        """Answer `data` by the node lane if it is wholly forwarded GETs (`_FORWARDED`), in
        order; False, with nothing answered, if it is not."""
        match = _FORWARDED.match(data)
        if match is None:
            return False
        if match.end() == len(data):  # the common case: one request
            self._answer_forward(*match.groups())
            return True
        found = [match]
        while (end := match.end()) < len(data):
            match = _FORWARDED.match(data, end)
            if match is None:
                return False
            found.append(match)
        for match in found:
            self._answer_forward(*match.groups())
        return True

    def _answer_forward(
        self, target: bytes, hops: bytes, budget: bytes, request_id: bytes | None
    ) -> None:
        """A request of the node lane: answered now (`_answer_plain`), or queued behind the
        one this connection is still answering."""
        if self._closing:
            return
        if self._task is not None or self._queue:
            headers = _node_headers(hops, budget, request_id)
            self._queue.append(_Request(target, "GET", headers, [], False, True))
            if len(self._queue) >= _MAX_QUEUED:
                self._pause_reading()
            return
        self._answer_plain(target, hops, budget, request_id)

    def _dispatch(
        self,
        path: bytes,
        query: bytes,
        method: str,
        headers: dict[bytes, bytes],
        body: list[bytes],
        keep_alive: bool,
        identity: Identity,
    ) -> None:
        """Answer an admitted request: the key path, or the generic dispatch in a task."""
        if method == "GET" and not query:
            hops, budget = headers.get(_HOPS), headers.get(_BUDGET)
            if self._answer_key(path, hops, budget, identity, keep_alive):
                return
        self._generic(path, query, method, headers, body, keep_alive, identity)

    def _answer_key(
        self,
        path: bytes,
        hops: bytes | None,
        budget: bytes | None,
        identity: Identity,
        keep_alive: bool,
    ) -> bool:
        """A GET without a query by the key path: answered now, or asked of the owner (or
        waited for) in the background. False if the key path declines it."""
        found = self._keys.answer_now(path, hops, budget, identity)
        if isinstance(found, bytes):
            self._write_found(found, keep_alive)
            return True
        if isinstance(found, Response):
            self._write(found, keep_alive)
            return True
        if isinstance(found, Pending):
            # Asked of the owner with callbacks (no task, no future), or in a task.
            self._task = _FORWARD
            self._task_keep_alive = keep_alive
            self._task_head = False
            if self._keys.forward_now(found, self._forward_answered, self._carry_on):
                self._gate.in_flight += 1
            else:
                self._wait(self._task_for(self._keys.finish(found)), keep_alive)
            return True
        return False

    def _generic(
        self,
        path: bytes,
        query: bytes,
        method: str,
        headers: dict[bytes, bytes],
        body: list[bytes],
        keep_alive: bool,
        identity: Identity,
    ) -> None:
        """Everything but a key read answered by the key path: `HttpApi.handle` in a task."""
        text_headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers.items()}
        answer = self._api.handle(
            method,
            path.decode("latin-1"),
            query.decode("latin-1"),
            text_headers,
            b"".join(body),
            identity,
        )
        self._wait(self._task_for(answer), keep_alive, head=method == "HEAD")

    def _internal_error(self, exc: Exception) -> None:
        log.error("unexpected error answering a request", exc_info=exc)
        self._write(_INTERNAL, keep_alive=False)

    @staticmethod
    def _task_for(answer: Coroutine[object, object, Response]) -> asyncio.Future[Response]:
        # The task copies the context, with the request id the gate just set.
        return asyncio.get_running_loop().create_task(answer)

    def _wait(
        self, answer: asyncio.Future[Response], keep_alive: bool, *, head: bool = False
    ) -> None:
        """Answer when `answer` is done; the requests behind it on this connection wait."""
        self._gate.in_flight += 1
        self._task = answer
        self._task_keep_alive = keep_alive
        self._task_head = head
        # Runs in a copy of this context: the request id the gate set for this request.
        answer.add_done_callback(self._answered)

    def _forward_answered(self, response: Response) -> None:
        """The owner's answer to the forward this connection waits for (`_FORWARD`)."""
        self._gate.in_flight -= 1
        self._task = None
        if not self._closing:
            self._write(response, keep_alive=self._task_keep_alive)
            self._next()

    def _carry_on(self, rest: Coroutine[object, object, Response]) -> None:
        """The forward this connection waits for goes on in a task (`KeyPath.finish`)."""
        if self._closing:
            self._gate.in_flight -= 1
            self._task = None
            rest.close()
            return
        task = self._task_for(rest)
        self._task = task
        task.add_done_callback(self._answered)

    def _answered(self, answer: asyncio.Future[Response]) -> None:
        self._gate.in_flight -= 1
        self._task = None
        if answer.cancelled() or self._closing:
            return
        keep_alive = self._task_keep_alive
        exc = answer.exception()
        if exc is None:
            response = answer.result()
        else:  # the API answers its own errors; this is a last resort
            log.error("unexpected error answering a request", exc_info=exc)
            response, keep_alive = _INTERNAL, False
        self._write(response, keep_alive=keep_alive, head=self._task_head)
        self._next()

    def _next(self) -> None:
        """Answer the requests that waited behind the one just answered."""
        while self._queue and self._task is None and not self._closing:
            r = self._queue.popleft()
            self._answer(r.target, r.method, r.headers, r.body, r.too_large, r.keep_alive)
        self._maybe_resume_reading()

    def _write(
        self, response: Response, keep_alive: bool, *, with_id: bool = True, head: bool = False
    ) -> None:
        """Queue `response` for the end of this loop iteration (`LoopServer.to_flush`).

        `with_id`: with the request id the gate set (not for a request refused before the
        gate); `head`: without the body (the answer to a HEAD).
        """
        if self._transport is None or self._closing:
            return
        body = response.body
        status = response.status
        rid = REQUEST_ID.get() if with_id else None
        if response.headers is JSON_HEADERS and keep_alive and rid is not None and not head:
            # The common answer in one formatting step.
            data = _JSON_ANSWER % (_status_line(status), len(body), rid.encode("latin-1"), body)
        else:
            data = _status_line(status)
            for name, value in response.headers:
                data += f"{name}: {value}\r\n".encode("latin-1")
            data += b"content-length: %d\r\n" % len(body)
            if rid is not None:
                data += b"x-request-id: " + rid.encode("latin-1") + b"\r\n"
            if not keep_alive:
                data += b"connection: close\r\n"
            data += b"\r\n" if head else b"\r\n" + body
        self._out.append(data)
        if len(self._out) == 1:
            self._server.to_flush(self)
        if not keep_alive:
            self._closing = True  # no more requests; the flush closes the transport

    def _write_found(self, body: bytes, keep_alive: bool) -> None:
        """`_write` for the common answer, a found key's 200 (`KeyPath.answer_now`): its
        bytes in one formatting step, without a `Response` or `_write`'s general checks."""
        rid = REQUEST_ID.get()
        if not keep_alive or rid is None or self._closing:
            self._write(Response(200, body), keep_alive)
            return
        out = self._out
        out.append(_FOUND % (len(body), rid.encode("latin-1"), body))
        if len(out) == 1:
            self._server.to_flush(self)

    def flush(self, now: float) -> None:
        """Send what `_write` queued (`LoopServer` calls it once per loop iteration, with the
        time then: one clock reading for all connections)."""
        out, self._out = self._out, []
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if out:
            transport.write(out[0] if len(out) == 1 else b"".join(out))
            self.last_active = now
        if self._closing:
            transport.close()

    def _refuse(self, status: int, message: str) -> None:
        """Answer a request that cannot be parsed or waited for, and close."""
        if self._task is None and not self._queue:
            response = error_response(status, "bad_request", message)
            self._write(response, keep_alive=False, with_id=False)
        self.close()

    def close(self) -> None:
        """Close after what is queued is sent."""
        if not self._closing:
            self._closing = True
            if self._transport is not None and not self._out:
                self._transport.close()

    def check_timeouts(
        self, now: float, header_s: float, idle_s: float, request_s: float
    ) -> str | None:
        """Close a connection that never sent anything, or is idle; 408 for a request that
        does not arrive in time. Which timeout struck ("header", "idle", "request"), if any."""
        if self._task is not None or self._queue or self._out or self._closing:
            return None  # answering, or about to send an answer
        if self.started is not None:
            if now - self.started > request_s:
                message = f"the request did not arrive within {request_s:g} s"
                response = error_response(408, "request_timeout", message)
                self._write(response, keep_alive=False, with_id=False)
                return "request"
        elif self.last_active == self.opened:  # nothing read or sent yet
            if now - self.opened > header_s:
                self.close()
                return "header"
        elif now - self.last_active > idle_s:
            self.close()
            return "idle"
        return None

    def _pause_reading(self) -> None:
        if not self._paused_reading and self._transport is not None:
            self._paused_reading = True
            self._transport.pause_reading()

    def _maybe_resume_reading(self) -> None:
        if (
            self._paused_reading
            and not self._paused_writing
            and len(self._queue) < _MAX_QUEUED
            and self._transport is not None
            and not self._closing
        ):
            self._paused_reading = False
            self._transport.resume_reading()


def _node_headers(
    hops: bytes | None, budget: bytes | None, request_id: bytes | None
) -> dict[bytes, bytes]:
    """The headers of a node-lane request, as the parser would have kept them (the ones read)."""
    headers = {}
    if hops is not None:
        headers[_HOPS] = hops
    if budget is not None:
        headers[_BUDGET] = budget
    if request_id is not None:
        headers[_REQUEST_ID] = request_id
    return headers


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    return line if line is not None else b"HTTP/1.1 %d \r\n" % status


class LoopServer(Collector):
    """The HTTP API served by asyncio protocols in the running loop.

    `max_connections` (None: `default_max_connections` of the open-file limit) bounds the
    connections open at once; the timeouts are `HttpSettings`'. While it serves, its
    connection series are in the API's metrics registry (`collect`).
    """

    def __init__(
        self,
        api: HttpApi,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        backlog: int = 1024,
        max_connections: int | None = None,
        header_timeout_s: float = 10.0,
        idle_timeout_s: float = 75.0,
        request_timeout_s: float = 30.0,
    ) -> None:
        self.api = api
        self.host = host
        self.port = port
        self.connections: set[_Connection] = set()
        self.max_connections = connection_limit(max_connections, backlog)
        self.refused = 0  # connections refused past `max_connections`
        self.timeouts = {"header": 0, "idle": 0, "request": 0}  # connections each closed
        self._ssl = ssl_context
        self._backlog = backlog
        self._header_s = header_timeout_s
        self._idle_s = idle_timeout_s
        self._request_s = request_timeout_s
        # A few sweeps per shortest timeout, at most one a second.
        shortest = min(header_timeout_s, idle_timeout_s, request_timeout_s)
        self._sweep_s = min(1.0, max(0.05, shortest / 4))
        self._refusal = _refusal(self.max_connections)
        self._refused_logged = 0  # `refused` when it was last logged
        self._refusal_logged_at = -_REFUSAL_LOG_EVERY_S
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._flushing: list[_Connection] = []
        self._registered = False

    def to_flush(self, connection: _Connection) -> None:
        """Send `connection`'s answers at the end of this loop iteration.

        The loop first answers every request that arrived on every connection, then sends
        the answers in one burst, so that a client woken by the first answer may find the
        rest ready instead of being woken for each; it also lets pipelined answers of one
        connection go out in one write. Writing each answer at once instead cost ~50% more
        CPU per lookup (`benchmarks/bench_http.py`): clients then answered by one write each
        send their next request at once, and each loop turn finds fewer requests.
        """
        if not self._flushing:
            asyncio.get_running_loop().call_soon(self._flush)
        self._flushing.append(connection)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self),
            self.host,
            self.port,
            ssl=self._ssl,
            backlog=self._backlog,
            reuse_address=True,
            # An unfinished TLS handshake is a connection that has sent no request yet.
            ssl_handshake_timeout=self._header_s if self._ssl is not None else None,
        )
        self._sweeper = loop.create_task(self._sweep())
        if not self._registered:
            self.api.metrics.registry.register(self)
            self._registered = True
        files = open_file_limit()
        log.info(
            "HTTP on %s:%d: at most %d connections (open-file limit %s)",
            self.host,
            self.port,
            self.max_connections,
            files if files >= 0 else "unlimited",
        )
        if self.max_connections > default_max_connections(files, self._backlog):
            log.warning(
                "max_connections %d leaves too few of the %d open files the process may hold "
                "for Kafka, RocksDB and bursts of new connections: raise the limit "
                "(ulimit -n, LimitNOFILE=) or lower max_connections",
                self.max_connections,
                files,
            )

    def refuse(self, transport: asyncio.Transport) -> None:
        """Answer a connection past `max_connections` 503 and close it; count it, and log
        (at most every `_REFUSAL_LOG_EVERY_S`)."""
        transport.write(self._refusal)
        transport.close()
        self.refused += 1
        now = time.monotonic()
        if now - self._refusal_logged_at >= _REFUSAL_LOG_EVERY_S:
            # Not any request's: the id the last request on the loop left must not show.
            token = REQUEST_ID.set(None)
            try:
                log.warning(
                    "HTTP connection limit reached: %d open (max_connections %d); %d new "
                    "connections refused since the last report",
                    len(self.connections),
                    self.max_connections,
                    self.refused - self._refused_logged,
                )
            finally:
                REQUEST_ID.reset(token)
            self._refusal_logged_at = now
            self._refused_logged = self.refused

    async def stop(self) -> None:
        """Stop accepting and close every connection (requests in flight are cancelled)."""
        server, self._server = self._server, None
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        if server is not None:
            server.close()
            for connection in list(self.connections):
                connection.close()
            await server.wait_closed()
        if self._registered:
            self.api.metrics.registry.unregister(self)
            self._registered = False

    def _flush(self) -> None:
        connections, self._flushing = self._flushing, []
        now = time.monotonic()
        for connection in connections:
            connection.flush(now)

    async def _sweep(self) -> None:
        timeouts = self.timeouts
        while True:
            await asyncio.sleep(self._sweep_s)
            now = time.monotonic()
            for connection in list(self.connections):
                struck = connection.check_timeouts(
                    now, self._header_s, self._idle_s, self._request_s
                )
                if struck is not None:
                    timeouts[struck] += 1

    def collect(self) -> Iterator[Metric]:
        """The connection series, read when /metrics is fetched."""
        yield GaugeMetricFamily(
            "sparkiq_http_connections", "HTTP connections open.", len(self.connections)
        )
        yield GaugeMetricFamily(
            "sparkiq_http_connections_limit",
            "HTTP connections the node holds open at most (max_connections).",
            self.max_connections,
        )
        yield CounterMetricFamily(
            "sparkiq_http_connections_refused",
            "HTTP connections refused (503, closed at once) past max_connections.",
            self.refused,
        )
        closed = CounterMetricFamily(
            "sparkiq_http_connection_timeouts",
            "HTTP connections closed by a timeout: header (sent nothing), idle (between "
            "requests), request (408: a request that did not arrive in time).",
            labels=("timeout",),
        )
        for timeout, n in self.timeouts.items():
            closed.add_metric((timeout,), n)
        yield closed


def _refusal(limit: int) -> bytes:
    """What a connection past the limit is sent before it is closed."""
    message = f"this node holds its limit of {limit} connections; retry shortly"
    response = error_response(503, "too_many_connections", message)
    head = _status_line(503) + b"".join(
        f"{name}: {value}\r\n".encode("latin-1") for name, value in response.headers
    )
    return (
        head
        + b"content-length: %d\r\nretry-after: 1\r\nconnection: close\r\n\r\n" % len(response.body)
        + response.body
    )
