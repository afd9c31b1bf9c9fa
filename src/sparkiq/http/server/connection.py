"""One client connection of the loop server (`sparkiq.http.server.loopserver`, whose docstring says
what a connection does): parse, hand each request to the app, answer in order, keep alive.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol, cast

import httptools

from sparkiq.http.messages.wire import (
    ANSWER,
    FORWARDED,
    FOUND,
    answer_head,
    forwarded_headers,
    status_line,
)
from sparkiq.http.seam import (
    JSON_HEADERS,
    REQUEST_ID,
    Answer,
    App,
    Later,
    Response,
    Stream,
)
from sparkiq.http.server.plainlane import plain_get

log = logging.getLogger(__name__)

# Requests parsed but not yet answered on one connection before it stops reading.
_MAX_QUEUED = 64
_INTERNAL_MESSAGE = "internal error; the node logged the details"
_LAST_CHUNK = b"0\r\n\r\n"  # the end of a chunked answer (a `Stream`)

# After a request the lane declined, the connection's next requests go straight to the parser:
# a client whose requests carry headers the lane leaves alone (a credential, or a node's
# forwarding headers) would otherwise pay for the lane's look at every one of them (~8k
# instructions; `benchmarks/bench_lane.py`). It tries the lane again after this many.
_LANE_SKIPS = 16


class Server(Protocol):
    """What a connection needs of its server (`sparkiq.http.server.loopserver.LoopServer`)."""

    app: App
    not_plain: re.Pattern[bytes]  # `plainlane.not_plain` of the app's headers
    connections: set[Connection]  # open, counted against `max_connections`
    max_connections: int

    # Answer a connection past `max_connections` and close it.
    def refuse(self, transport: asyncio.Transport) -> None: ...
    # Send `connection`'s answers at the end of this loop iteration.
    def to_flush(self, connection: Connection) -> None: ...


@dataclass(slots=True)
class _Request:
    """A parsed request waiting behind another on its connection (pipelining)."""

    target: bytes
    method: str
    headers: dict[bytes, bytes]
    body: list[bytes]
    too_large: bool
    keep_alive: bool


class Connection(asyncio.Protocol):
    """One client connection. The request being parsed lives in the connection's own fields
    (`_target`, `_headers`, `_body`, `_too_large`); a `_Request` is made only for one that has
    to wait its turn. Header names are lower-case bytes, values bytes, decoded when read."""

    def __init__(self, server: Server) -> None:
        self._server = server
        app = self._app = server.app
        self._answer_app = app.answer
        self._answer_lane = app.answer_plain
        self._max_body = app.max_body_bytes
        self._not_plain = server.not_plain
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
        # The answer being awaited (a `Later`, or the task sending a `Stream`), and how to
        # send it.
        self._task: Later | asyncio.Task[None] | None = None
        self._task_keep_alive = True
        self._task_head = False
        self._closing = False
        self._out: list[bytes] = []  # answers written since the last flush
        self._paused_reading = False
        self._paused_writing = False
        self._drained: asyncio.Future[None] | None = None  # a stream waits for the writes
        # When the connection last read or sent anything; `opened` until it does.
        self.last_active = self.opened = time.monotonic()
        self.started: float | None = None  # when the request being received began

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
        self._release_stream()

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
            elif (plain := plain_get(data, self._not_plain, self._plain_head)) is not None:
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
        self._release_stream()
        self._maybe_resume_reading()

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
                self._answer(self._target, self._method(), headers, [], True, False)
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
        target, headers, body, too_large = self._target, self._headers, self._body, self._too_large
        self._target, self._headers, self._body, self._too_large = b"", {}, [], False
        self._body_size = 0
        self._in_message = False
        if self._closing:
            return
        method = self._method()
        keep_alive = self._parser.should_keep_alive()
        if self._task is not None or self._queue:
            self._queue.append(_Request(target, method, headers, body, too_large, keep_alive))
            if len(self._queue) >= _MAX_QUEUED:
                self._pause_reading()
            return
        self._answer(target, method, headers, body, too_large, keep_alive)

    def _method(self) -> str:
        return self._parser.get_method().decode("ascii")

    def _answer(
        self,
        target: bytes,
        method: str,
        headers: dict[bytes, bytes],
        body: list[bytes],
        too_large: bool,
        keep_alive: bool,
    ) -> None:
        """Have the app answer a request the parser framed (a body over the limit: None, and
        the connection closes after the answer)."""
        try:
            answer = self._answer_app(
                method, target, headers, None if too_large else b"".join(body)
            )
        except Exception as exc:  # the app answers its own errors; this is a last resort
            self._internal_error(exc)
            return
        self._give(answer, keep_alive and not too_large, method == "HEAD")

    def _answer_plain(
        self,
        target: bytes,
        hops: bytes | None = None,
        budget: bytes | None = None,
        request_id: bytes | None = None,
    ) -> None:
        """`_answer` for a request of the plain lane: a GET of `target` (no query) without
        any header the app reads, on a connection that keeps alive; or of the node lane: the
        same with a node's forwarding headers (`hops`, `budget`, `request_id`)."""
        try:
            answer = self._answer_lane(target, hops, budget, request_id)
        except Exception as exc:  # the app answers its own errors; this is a last resort
            self._internal_error(exc)
            return
        if answer.__class__ is bytes:
            self._write_found(answer, True)
        elif answer.__class__ is Response or answer.__class__ is Stream:
            self._give(answer, True, False)
        else:  # a `Later` (written out: every forward's path)
            self._task = answer  # type: ignore[assignment]
            self._task_keep_alive = True
            self._task_head = False
            answer.then(self._answered)  # type: ignore[union-attr]

    def _answer_forwards(self, data: bytes) -> bool:
        """Answer `data` by the node lane if it is wholly forwarded GETs (`wire.FORWARDED`),
        in order; False, with nothing answered, if it is not."""
        match = FORWARDED.match(data)
        if match is None:
            return False
        if match.end() == len(data):  # the common case: one request
            self._answer_forward(*match.groups())
            return True
        found = [match]
        while (end := match.end()) < len(data):
            match = FORWARDED.match(data, end)
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
            headers = forwarded_headers(hops, budget, request_id)
            self._queue.append(_Request(target, "GET", headers, [], False, True))
            if len(self._queue) >= _MAX_QUEUED:
                self._pause_reading()
            return
        self._answer_plain(target, hops, budget, request_id)

    def _give(self, answer: Answer, keep_alive: bool, head: bool) -> None:
        """Send `answer` (`seam.Answer`): now, when it comes (a `Later`; the requests
        behind it on this connection wait), or as it is made (a `Stream`)."""
        if isinstance(answer, bytes):
            self._write_found(answer, keep_alive)
        elif isinstance(answer, Response):
            self._write(answer, keep_alive, True, head)
        elif isinstance(answer, Stream):
            self._stream(answer, keep_alive, head)
        else:
            self._task = answer
            self._task_keep_alive = keep_alive
            self._task_head = head
            answer.then(self._answered)

    def _answered(self, response: Response) -> None:
        """The answer of the `Later` this connection waits for."""
        self._task = None
        if not self._closing:
            self._write(response, self._task_keep_alive, True, self._task_head)
            self._next()

    def _internal_error(self, exc: Exception) -> None:
        log.error("unexpected error answering a request", exc_info=exc)
        self._write(self._app.refusal(500, _INTERNAL_MESSAGE), keep_alive=False)

    def _next(self) -> None:
        """Answer the requests that waited behind the one just answered."""
        while self._queue and self._task is None and not self._closing:
            r = self._queue.popleft()
            self._answer(r.target, r.method, r.headers, r.body, r.too_large, r.keep_alive)
        self._maybe_resume_reading()

    def _stream(self, stream: Stream, keep_alive: bool, head: bool) -> None:
        """Send a `Stream`'s head now and its chunks as they come (chunked framing; none for
        a HEAD), in a task; the requests behind it on this connection wait for its end."""
        data = answer_head(stream.status, stream.headers, REQUEST_ID.get(), keep_alive)
        self._queue_out(data + b"transfer-encoding: chunked\r\n\r\n", True)
        self._task_keep_alive = keep_alive
        self._task = task = asyncio.get_running_loop().create_task(self._pump(stream, head))
        task.add_done_callback(self._streamed)

    async def _pump(self, stream: Stream, head: bool) -> None:
        chunks = stream.chunks
        try:
            async for chunk in chunks:
                if self._closing or head:
                    break
                if chunk:
                    self._queue_out(b"%x\r\n%b\r\n" % (len(chunk), chunk), True)
                if self._paused_writing:  # the client reads slower than the stream comes
                    self._drained = asyncio.get_running_loop().create_future()
                    await self._drained
        finally:
            await stream.close()
        self._queue_out(b"" if head else _LAST_CHUNK, self._task_keep_alive)

    def _streamed(self, task: asyncio.Task[None]) -> None:
        self._task = None
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:  # nothing more can be said in this answer: end the connection
            log.error("a streamed answer failed", exc_info=exc)
            self.close()
            return
        self._next()

    def _release_stream(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def _queue_out(self, data: bytes, keep_alive: bool) -> None:
        if self._transport is None or self._closing:
            return
        self._out.append(data)
        if len(self._out) == 1:
            self._server.to_flush(self)
        if not keep_alive:
            self._closing = True  # no more requests; the flush closes the transport

    def _write(
        self, response: Response, keep_alive: bool, with_id: bool = True, head: bool = False
    ) -> None:
        """Queue `response` for the end of this loop iteration (`LoopServer.to_flush`).

        `with_id`: with the request id the app set (not for a request refused before the
        app saw it); `head`: without the body (the answer to a HEAD).
        """
        if self._transport is None or self._closing:
            return
        body = response.body
        status = response.status
        rid = REQUEST_ID.get() if with_id else None
        if response.headers is JSON_HEADERS and keep_alive and rid is not None and not head:
            # The common answer in one formatting step.
            data = ANSWER % (status_line(status), len(body), rid.encode("latin-1"), body)
        else:
            data = answer_head(status, response.headers, rid, keep_alive)
            data += b"content-length: %d\r\n\r\n" % len(body)
            if not head:
                data += body
        self._out.append(data)
        if len(self._out) == 1:
            self._server.to_flush(self)
        if not keep_alive:
            self._closing = True  # no more requests; the flush closes the transport

    def _write_found(self, body: bytes, keep_alive: bool) -> None:
        """`_write` for the common answer, a found key's 200 (`seam.Answer`'s bytes):
        its bytes in one formatting step, without a `Response` or `_write`'s general checks."""
        rid = REQUEST_ID.get()
        if not keep_alive or rid is None or self._closing:
            self._write(Response(200, body), keep_alive)
            return
        out = self._out
        out.append(FOUND % (len(body), rid.encode("latin-1"), body))
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
            self._write(self._app.refusal(status, message), keep_alive=False, with_id=False)
        self.close()

    def end_stream(self) -> asyncio.Task[None] | None:
        """Cancel the streamed answer being sent, if any (the server stops); its task, to be
        waited for."""
        task = self._task
        if not isinstance(task, asyncio.Task):
            return None
        task.cancel()
        self._release_stream()
        return task

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
                self._write(self._app.refusal(408, message), keep_alive=False, with_id=False)
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
