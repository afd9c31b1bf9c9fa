"""The seam between the HTTP server and the node's API: the only thing the server imports.

The server (`sparkiq.http.server.loopserver`, or the ASGI adapter the tests use) reads bytes
off a connection, frames requests and writes answers in order. Everything else -- admitting
a request (request id, load, caller), counting it in flight, routing, reading, forwarding,
rendering -- is the app's (`App`, implemented by `sparkiq.http.app.nodeapp.NodeApp`). The app
answers a request in one of four ways:

- `bytes`: the body of a 200 JSON answer, the common answer (a key found), which the server
  writes without a `Response`;
- a `Response`: the answer, now;
- a `Later`: the answer comes later (a forward to the owner, a wait for a replica); the server
  hands it a callback, and holds the requests behind it on the connection until it is called;
- a `Stream`: a head now, then chunks as they are made (watches), sent with chunked framing.

The request id the app set for a request (`REQUEST_ID`, None for one refused before it was
admitted) is in the context the server writes the answer in; the server echoes it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from sparkiq.http.messages.requestid import REQUEST_ID, REQUEST_ID_HEADER
from sparkiq.http.messages.responses import JSON_HEADERS, Response

__all__ = [
    "JSON_HEADERS",
    "REQUEST_ID",
    "REQUEST_ID_HEADER",
    "Answer",
    "App",
    "Later",
    "Response",
    "Stream",
]


class Later(Protocol):
    """An answer that comes later."""

    def then(self, done: Callable[[Response], None]) -> None:
        """Start answering; `done` is called once with the answer, in the request's context,
        unless `cancel` is called first. Called once, by the server."""

    def cancel(self) -> None:
        """The connection closed: stop, and do not call `done`."""


@dataclass(slots=True)
class Stream:
    """An answer sent as it is made: status and headers, then each chunk `chunks` yields as
    soon as it does; the answer ends when the iterator does. The server cancels the iterator
    (`aclose`) when the connection closes first."""

    status: int
    headers: tuple[tuple[str, str], ...]
    chunks: AsyncIterator[bytes]

    async def close(self) -> None:
        """End `chunks` (an async generator's `aclose`), if it can be ended."""
        aclose = getattr(self.chunks, "aclose", None)
        if aclose is not None:
            await aclose()


Answer = bytes | Response | Later | Stream


class App(Protocol):
    """What a server needs of the node's API."""

    # Header names (lower-case) the app reads: the server's lane for plain GETs
    # (`answer_plain`) takes no request that carries one of them.
    read_headers: tuple[str, ...]
    # Largest request body the app accepts: the server stops reading a body past it and
    # passes the request with `body=None`.
    max_body_bytes: int

    def answer(
        self, method: str, target: bytes, headers: Mapping[bytes, bytes], body: bytes | None
    ) -> Answer:
        """Answer a request: `target` as sent (path and query), `headers` by lower-case
        name, `body` None when it was over `max_body_bytes` (answered 413)."""

    def answer_plain(
        self,
        target: bytes,
        hops: bytes | None = None,
        budget: bytes | None = None,
        request_id: bytes | None = None,
    ) -> Answer:
        """`answer` for a GET of `target` (no query) with none of `read_headers` but,
        for a node's forward, these three (`sparkiq.http.messages.wire.FORWARDED`)."""

    def refusal(self, status: int, message: str) -> Response:
        """The answer to a request the server refuses itself: 400 (cannot be parsed), 408
        (did not arrive in time), 500 (the app raised), 503 (too many connections). Not
        a request's: no request id goes with it."""
