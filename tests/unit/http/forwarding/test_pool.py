"""The forwarding client (`sparkiq.http.forwarding.pool`) against a raw owner on loopback.

The owner here is a plain asyncio server that answers in request order, as HTTP/1.1 asks, and
records which requests arrived on which connection and in how many reads; a test may make it
hold an answer back, close after one, or answer chunked. What is checked: the single-key GETs
of one loop iteration share a connection up to the pipeline depth and leave in one write, each
caller gets its own answer, and whatever goes wrong on a pipelined connection (the owner
closes it, an answer is overdue, a caller gives up) never hands one request's answer to
another and leaves the untouched requests free to be asked again.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from sparkiq.dev.ports import free_port
from sparkiq.http.forwarder import Unreachable
from sparkiq.http.forwarding.pool import PoolForwarder
from sparkiq.http.messages.responses import Response


@dataclass
class Owner:
    """What the owner saw, and how it answers."""

    port: int
    reads: list[int] = field(default_factory=list)  # requests completed per read
    targets: list[list[str]] = field(default_factory=list)  # per connection, in order
    hold: set[str] = field(default_factory=set)  # targets answered only when released
    released: asyncio.Event = field(default_factory=asyncio.Event)
    close_after: set[str] = field(default_factory=set)  # answered with Connection: close
    chunked: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answer(self, target: str) -> bytes:
        body = echo(target)
        close = b"connection: close\r\n" if target in self.close_after else b""
        if self.chunked:
            half = len(body) // 2
            chunks = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (
                half,
                body[:half],
                len(body) - half,
                body[half:],
            )
            return b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n" + close + b"\r\n" + chunks
        return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), close, body)


@pytest.fixture
async def owner() -> AsyncIterator[Owner]:
    state = Owner(free_port())

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen: list[str] = []
        state.targets.append(seen)
        buf = b""
        try:
            while data := await reader.read(65536):
                buf += data
                heads = buf.split(b"\r\n\r\n")
                buf = heads.pop()
                state.reads.append(len(heads))
                for head in heads:
                    target = head.split(b" ", 2)[1].decode()
                    seen.append(target)
                    if target in state.hold:
                        await state.released.wait()
                    writer.write(state.answer(target))
                    if target in state.close_after:
                        writer.close()
                        return
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", state.port)
    try:
        yield state
    finally:
        state.released.set()
        server.close()


Result = Response | Unreachable | None


class Answers(dict[str, Result]):
    """The answers `send_now` passed to its callbacks, by name."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = asyncio.Event()

    def to(self, name: str) -> Callable[[Result], None]:
        def on_answer(answer: Result) -> None:
            self[name] = answer
            self._changed.set()

        return on_answer

    async def settle(self, count: int) -> None:
        async with asyncio.timeout(5):
            while len(self) < count:
                self._changed.clear()
                await self._changed.wait()


async def warm(pool: PoolForwarder, owner: Owner, connections: int) -> None:
    """Open `connections` pooled connections (`send_now` only takes ones that exist)."""
    answers = await asyncio.gather(
        *(
            pool.send(owner.url, "GET", f"/warm/{i}", None, hops=0, budget_s=2)
            for i in range(connections)
        )
    )
    assert all(isinstance(a, Response) and a.status == 200 for a in answers)
    owner.reads.clear()


async def ask_all(pool: PoolForwarder, owner: Owner, targets: list[str]) -> Answers:
    """`send_now` each target within one loop iteration (no await in between); the answers."""
    answers = Answers()
    for target in targets:
        assert pool.send_now(owner.url, target, hops=0, budget_s=2, on_answer=answers.to(target))
    await answers.settle(len(targets))
    return answers


def echo(target: str) -> bytes:
    """The body the owner answers `target` with."""
    return b'{"target":"%s"}' % target.encode()


def body_of(answer: Result) -> bytes:
    assert isinstance(answer, Response), answer
    return answer.body


async def test_one_iteration_shares_a_connection_in_one_write(owner: Owner) -> None:
    pool = PoolForwarder(pipeline_depth=16)
    await warm(pool, owner, 1)
    targets = [f"/k/{i}" for i in range(10)]
    answers = await ask_all(pool, owner, targets)
    # Every caller got the answer to its own request.
    assert {t: body_of(a) for t, a in answers.items()} == {t: echo(t) for t in targets}
    assert owner.targets[0][1:] == targets  # after the warm-up request, on the one connection
    assert owner.reads == [10]  # all ten arrived in one read
    # The connection is idle again, and reused.
    answers.clear()
    assert pool.send_now(owner.url, "/k/again", hops=0, budget_s=2, on_answer=answers.to("x"))
    await answers.settle(1)
    assert len(owner.targets) == 1
    assert owner.targets[0][-1] == "/k/again"
    await pool.close()


async def test_depth_bounds_the_requests_per_connection(owner: Owner) -> None:
    pool = PoolForwarder(pipeline_depth=4)
    await warm(pool, owner, 3)
    targets = [f"/k/{i}" for i in range(10)]
    answers = await ask_all(pool, owner, targets)
    assert sorted(len(seen) - 1 for seen in owner.targets) == [2, 4, 4]
    assert all(body_of(answers[t]) == echo(t) for t in targets)
    # Out of idle connections, `send_now` says so (the caller then uses `send`).
    more = Answers()
    taken = [
        pool.send_now(owner.url, f"/more/{i}", hops=0, budget_s=2, on_answer=more.to(str(i)))
        for i in range(13)
    ]
    assert taken == [True] * 12 + [False]
    await more.settle(12)
    await pool.close()


async def test_depth_one_is_one_request_per_connection(owner: Owner) -> None:
    pool = PoolForwarder(pipeline_depth=1)
    await warm(pool, owner, 2)
    answers = Answers()
    taken = [
        pool.send_now(owner.url, f"/k/{i}", hops=0, budget_s=2, on_answer=answers.to(str(i)))
        for i in range(3)
    ]
    assert taken == [True, True, False]
    await answers.settle(2)
    assert sorted(len(seen) for seen in owner.targets) == [2, 2]
    await pool.close()


async def test_chunked_answers_pipelined(owner: Owner) -> None:
    owner.chunked = True
    pool = PoolForwarder()
    await warm(pool, owner, 1)
    targets = [f"/c/{i}" for i in range(5)]
    answers = await ask_all(pool, owner, targets)
    assert all(body_of(answers[t]) == echo(t) for t in targets)
    await pool.close()


async def test_owner_closing_mid_pipeline_leaves_the_rest_to_ask_again(owner: Owner) -> None:
    owner.close_after.add("/k/1")
    pool = PoolForwarder()
    await warm(pool, owner, 1)
    answers = await ask_all(pool, owner, [f"/k/{i}" for i in range(4)])
    assert body_of(answers["/k/0"]) == echo("/k/0")
    assert body_of(answers["/k/1"]) == echo("/k/1")
    # No answer of theirs began: None, i.e. "ask again" (the read loop does).
    assert answers["/k/2"] is None
    assert answers["/k/3"] is None
    # `send` asks again on a new connection by itself.
    again = await pool.send(owner.url, "GET", "/k/2", None, hops=0, budget_s=2)
    assert body_of(again) == echo("/k/2")
    await pool.close()


async def test_overdue_answer_expires_and_frees_the_rest(owner: Owner) -> None:
    owner.hold.add("/k/0")
    pool = PoolForwarder()
    await warm(pool, owner, 1)
    answers = Answers()
    assert pool.send_now(owner.url, "/k/0", hops=0, budget_s=0.2, on_answer=answers.to("0"))
    assert pool.send_now(owner.url, "/k/1", hops=0, budget_s=5, on_answer=answers.to("1"))
    await answers.settle(2)
    expired = answers["0"]
    assert isinstance(expired, Unreachable)
    assert "no answer within 0.200s" in expired.message
    assert answers["1"] is None  # behind the overdue one, nothing of it arrived: ask again
    await pool.close()


async def test_cancelled_request_never_hands_its_answer_to_another(owner: Owner) -> None:
    owner.hold.add("/slow")
    pool = PoolForwarder()
    await warm(pool, owner, 1)
    slow = asyncio.create_task(pool.send(owner.url, "GET", "/slow", None, hops=0, budget_s=5))
    await asyncio.sleep(0.1)
    slow.cancel()
    # The connection still owes the cancelled request's answer: a new request takes another.
    fast = await pool.send(owner.url, "GET", "/fast", None, hops=0, budget_s=2)
    assert body_of(fast) == echo("/fast")
    assert len(owner.targets) == 2
    owner.released.set()  # the owed answer arrives, is dropped, and frees its connection
    await asyncio.sleep(0.1)
    answers = await asyncio.gather(
        *(pool.send(owner.url, "GET", f"/after/{i}", None, hops=0, budget_s=2) for i in range(2))
    )
    assert [body_of(a) for a in answers] == [echo("/after/0"), echo("/after/1")]
    assert len(owner.targets) == 2  # both pooled connections reused, none opened
    await pool.close()


def test_depth_must_be_positive() -> None:
    with pytest.raises(ValueError, match="pipeline_depth"):
        PoolForwarder(pipeline_depth=0)


async def test_callbacks_run_in_their_requests_context_and_one_failing_spares_the_rest(
    owner: Owner,
) -> None:
    # A callback may forward again (the read loop), and a forward carries the request
    # id and credentials of the request's own context: it must not see a later request's.
    pool = PoolForwarder(pipeline_depth=16)
    await warm(pool, owner, 1)
    tag: contextvars.ContextVar[str] = contextvars.ContextVar("tag", default="none")
    answers = Answers()
    seen: dict[str, str] = {}

    def on_answer(name: str) -> Callable[[Result], None]:
        record = answers.to(name)

        def callback(answer: Result) -> None:
            seen[name] = tag.get()
            record(answer)
            if name == "/k/boom":
                raise RuntimeError("a callback that fails")

        return callback

    for name in ("/k/a", "/k/boom", "/k/b"):
        tag.set(f"request {name}")  # as the gate sets the request id, in one shared context
        assert pool.send_now(owner.url, name, hops=0, budget_s=2, on_answer=on_answer(name))
    tag.set("a later request")
    await answers.settle(3)
    assert seen == {n: f"request {n}" for n in ("/k/a", "/k/boom", "/k/b")}
    assert all(body_of(answers[n]) == echo(n) for n in ("/k/a", "/k/b"))
    # The connection survived the failing callback and serves the next request.
    again = Answers()
    assert pool.send_now(owner.url, "/k/c", hops=0, budget_s=2, on_answer=again.to("c"))
    await again.settle(1)
    assert body_of(again["c"]) == echo("/k/c")
    await pool.close()
