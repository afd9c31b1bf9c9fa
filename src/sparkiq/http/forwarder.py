"""What forwarding a request to its owner node means: the `Forwarder` protocol and its result.

The implementation is `sparkiq.http.forwarding.pool.PoolForwarder` (pooled keep-alive HTTP/1.1). A
forwarder never decides *whom* to ask (that is `routing`, from the view's placements) and
never re-encodes what it gets back: status, body bytes and Retry-After go to the caller as
they are. A connection that cannot be made or breaks, or an owner that does not answer in
the request's budget, is reported as `Unreachable` (data, not an exception), so the caller
can wait for the cluster map to change and try again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sparkiq.http.messages.responses import Response


@dataclass(frozen=True, slots=True)
class Unreachable:
    """The owner gave no answer: refused, reset, or too slow for the budget."""

    url: str
    message: str


class Forwarder(Protocol):
    """Sends one request to another node; the HTTP layer's only outbound dependency."""

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
        """Ask `base_url + target` (path and query); `hops` is this request's hop count."""
        ...

    def send_now(
        self,
        base_url: str,
        target: str,
        *,
        hops: int,
        budget_s: float,
        on_answer: Callable[[Response | Unreachable | None], None],
    ) -> bool:
        """Start a GET like `send` without a coroutine, if it can start at once.

        False: it cannot (e.g. no pooled connection to take); use `send`. True: `on_answer`
        is called once, with the answer, an `Unreachable`, or None when the attempt failed
        before any byte of its answer arrived (try `send`, which retries such failures
        itself).
        """
        ...

    async def close(self) -> None: ...
