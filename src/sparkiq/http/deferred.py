"""Answers that come later (`sparkiq.http.seam.Later`), counted in flight meanwhile.

A request the app answers later is in flight (the gate's load limit, `Gate.in_flight`) from
when the server starts it (`then`) until its answer is given, or its task ends after its
client went away. Two kinds: a key read the key path left pending (`keyread.Pending`: asked
of the owner with callbacks when a pooled connection is free, else finished in a task), and
any other coroutine (`Deferred`). `Counted` holds what both do once started.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from sparkiq.http.messages.responses import Response

log = logging.getLogger(__name__)

Work = Coroutine[object, object, Response]


class InFlight(Protocol):
    in_flight: int


class Runner(Protocol):
    """What starts and counts later answers (`sparkiq.http.app.nodeapp.NodeApp`)."""

    @property
    def gate(self) -> InFlight: ...

    def forward_now(
        self, pending: Any, reply: Callable[[Response], None], carry_on: Callable[[Work], None]
    ) -> bool: ...

    def finish(self, pending: Any) -> Work: ...

    def refusal(self, status: int, message: str) -> Response: ...


class Counted:
    """What a later answer does once started: answer once, count itself out, stop when
    cancelled. Subclasses start it (`then`) and hold the attributes below (in slots)."""

    app: Runner
    done: Callable[[Response], None] | None
    task: asyncio.Task[Response] | None
    cancelled: bool

    def cancel(self) -> None:
        self.cancelled = True
        if self.task is not None:
            self.task.cancel()

    def replied(self, response: Response) -> None:
        """The answer, given without a task (the owner's, to `forward_now`)."""
        self.app.gate.in_flight -= 1
        if not self.cancelled and self.done is not None:
            self.done(response)

    def run(self, work: Work) -> None:
        """Answer in a task (which copies the context: the request id the gate set)."""
        if self.cancelled:
            self.app.gate.in_flight -= 1
            work.close()
            return
        task = asyncio.get_running_loop().create_task(work)
        self.task = task
        task.add_done_callback(self.finished)

    def finished(self, task: asyncio.Task[Response]) -> None:
        self.app.gate.in_flight -= 1
        if task.cancelled() or self.cancelled or self.done is None:
            return
        exc = task.exception()
        if exc is None:
            self.done(task.result())
        else:  # the API answers its own errors; this is a last resort
            log.error("unexpected error answering a request", exc_info=exc)
            self.done(self.app.refusal(500, "internal error; the node logged the details"))


class Deferred(Counted):
    """A coroutine's answer (the generic dispatch, a wait)."""

    __slots__ = ("app", "cancelled", "done", "task", "work")

    def __init__(self, app: Runner, work: Work) -> None:
        self.app = app
        self.work: Work | None = work
        self.done = None
        self.task = None
        self.cancelled = False

    def then(self, done: Callable[[Response], None]) -> None:
        self.done = done
        self.app.gate.in_flight += 1
        work, self.work = self.work, None
        assert work is not None
        self.run(work)

    def cancel(self) -> None:
        super().cancel()
        if self.work is not None:  # never started
            self.work.close()
            self.work = None
