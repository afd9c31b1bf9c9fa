"""sparkiq's own HTTP/1.1 server (`sparkiq.http.server.loopserver`), spoken to over raw sockets.

What a client relies on beyond single requests: answers in request order on a pipelined
connection (also when one of them waits in a task), keep-alive and `Connection: close`,
HTTP/1.0, HEAD, `Expect: 100-continue`, bodies over the limit, malformed requests, the
header, idle and request timeouts, the connection limit, the plain lane (a plain GET
answered without the parser) and the node lane (the GETs another node's pool forwards,
answered without the parser).
"""

from __future__ import annotations

import asyncio
import json
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest

from sparkiq.core.errors import ConfigError
from sparkiq.core.openfiles import MIN_CONNECTIONS, OTHER_FILES, file_budget
from sparkiq.core.tables import TableDef
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpApi, HttpSettings
from sparkiq.http.app.nodeapp import NodeApp
from sparkiq.http.app.server import HttpServer
from sparkiq.http.server.loopserver import LoopServer
from sparkiq.http.server.plainlane import not_plain, plain_get
from sparkiq.http.settings import (
    connection_limit,
    default_max_connections,
    open_file_limit,
)
from sparkiq.http.staticview import StaticView
from tests.support.stores import put_value

USERS = TableDef("users", "users-changelog", 4)
SETTINGS = HttpSettings(request_budget_s=0.5, max_body_bytes=1000)


def users_view(port: int) -> StaticView:
    view = StaticView(f"http://127.0.0.1:{port}", [USERS])
    view.place_all(USERS, dict.fromkeys(range(USERS.partitions), view.url))
    for i in range(5):
        put_value(view, USERS, f"user-{i}", {"n": i})
    put_value(view, USERS, "a/b", {"n": "slash"})
    return view


@asynccontextmanager
async def serving(**options: float | int | None) -> AsyncIterator[LoopServer]:
    """A LoopServer over `users_view`, with LoopServer `options`."""
    port = free_port()
    api = HttpApi(users_view(port), SETTINGS)
    loop_server = LoopServer(NodeApp(api), "127.0.0.1", port, **options)  # type: ignore[arg-type]
    await loop_server.start()
    api.metrics.registry.register(loop_server)
    try:
        yield loop_server
    finally:
        api.metrics.registry.unregister(loop_server)
        await loop_server.stop()
        await api.close()


Serving = Callable[..., AbstractAsyncContextManager[LoopServer]]


@pytest.fixture
async def server() -> AsyncIterator[LoopServer]:
    async with serving(idle_timeout_s=1.0, request_timeout_s=1.0) as loop_server:
        yield loop_server


class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> dict[str, object]:
        value = json.loads(self.body)
        assert isinstance(value, dict)
        return value


async def read_answer(reader: asyncio.StreamReader, *, head_only: bool = False) -> Answer:
    """One response: status line, headers, and a body of Content-Length bytes."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    length = 0 if head_only else int(headers.get("content-length", "0"))
    body = await asyncio.wait_for(reader.readexactly(length), 5) if length else b""
    return Answer(status, headers, body)


async def connect(
    server: LoopServer,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(server.host, server.port)


def get(path: str, *headers: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "host: test", *headers, "", ""]
    return "\r\n".join(lines).encode()


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(), 5) == b""


async def test_pipelined_requests_are_answered_in_order(server: LoopServer) -> None:
    reader, writer = await connect(server)
    # A local key, the generic path (a range: answered in a task), a missing key, health.
    writer.write(
        get("/v1/tables/users/keys/user-1")
        + get("/v1/tables/users/range?limit=2")
        + get("/v1/tables/users/keys/nobody")
        + get("/healthz")
        + get("/v1/tables/users/keys/user-3")
    )
    answers = [await read_answer(reader) for _ in range(5)]
    assert [a.status for a in answers] == [200, 200, 404, 200, 200]
    assert answers[0].json()["value"] == {"n": 1}
    assert len(answers[1].json()["items"]) == 2  # type: ignore[arg-type]
    assert answers[4].json()["value"] == {"n": 3}
    ids = {a.headers["x-request-id"] for a in answers}
    assert len(ids) == 5  # every answer has its own request's id
    writer.close()


async def test_keep_alive_serves_many_requests_and_echoes_request_ids(
    server: LoopServer,
) -> None:
    reader, writer = await connect(server)
    for i in range(20):
        writer.write(get(f"/v1/tables/users/keys/user-{i % 5}", f"x-request-id: req-{i}"))
        answer = await read_answer(reader)
        assert answer.status == 200
        assert answer.headers["x-request-id"] == f"req-{i}"
        assert answer.headers["content-type"] == "application/json"
    writer.close()


async def test_raw_path_keeps_an_encoded_slash_inside_a_key(server: LoopServer) -> None:
    reader, writer = await connect(server)
    writer.write(get("/v1/tables/users/keys/a%2Fb"))
    answer = await read_answer(reader)
    assert answer.status == 200
    assert answer.json()["key"] == "a/b"
    writer.close()


async def test_connection_close_and_http10_end_the_connection(server: LoopServer) -> None:
    reader, writer = await connect(server)
    writer.write(get("/v1/tables/users/keys/user-1", "connection: close"))
    answer = await read_answer(reader)
    assert answer.status == 200
    assert answer.headers["connection"] == "close"
    assert await closed_by_server(reader)

    reader, writer = await connect(server)
    writer.write(b"GET /v1/tables/users/keys/user-2 HTTP/1.0\r\n\r\n")
    answer = await read_answer(reader)
    assert answer.status == 200
    assert answer.json()["value"] == {"n": 2}
    assert await closed_by_server(reader)


async def test_head_answers_headers_without_a_body(server: LoopServer) -> None:
    reader, writer = await connect(server)
    writer.write(b"HEAD /healthz HTTP/1.1\r\nhost: test\r\n\r\n" + get("/healthz"))
    head = await read_answer(reader, head_only=True)
    assert head.status == 405  # GET only; the head still says how long the body would be
    assert int(head.headers["content-length"]) > 0
    # The next answer starts right after the head: no body bytes were sent for the HEAD.
    answer = await read_answer(reader)
    assert (answer.status, answer.json()) == (200, {"status": "ok"})
    writer.close()


async def test_expect_100_continue_gets_continue_then_the_answer(server: LoopServer) -> None:
    reader, writer = await connect(server)
    body = json.dumps({"keys": ["user-1", "user-4", "nobody"]}).encode()
    writer.write(
        b"POST /v1/tables/users/multi-get HTTP/1.1\r\nhost: test\r\n"
        b"content-type: application/json\r\nexpect: 100-continue\r\n"
        b"content-length: %d\r\n\r\n" % len(body)
    )
    interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert interim.startswith(b"HTTP/1.1 100 Continue")
    writer.write(body)
    answer = await read_answer(reader)
    assert answer.status == 200
    items = answer.json()["items"]
    assert [i["value"] for i in items] == [{"n": 1}, {"n": 4}, None]  # type: ignore[index, union-attr]
    writer.close()


async def test_a_body_over_the_limit_is_413_before_it_is_sent(server: LoopServer) -> None:
    reader, writer = await connect(server)
    writer.write(
        b"POST /v1/tables/users/multi-get HTTP/1.1\r\nhost: test\r\n"
        b"content-type: application/json\r\ncontent-length: 5000\r\n\r\n"
    )
    answer = await read_answer(reader)
    assert answer.status == 413
    assert answer.json()["error"]["code"] == "too_large"  # type: ignore[index]
    assert await closed_by_server(reader)


async def test_a_chunked_body_over_the_limit_is_413(server: LoopServer) -> None:
    reader, writer = await connect(server)
    chunk = b"x" * 800
    writer.write(
        b"POST /v1/tables/users/multi-get HTTP/1.1\r\nhost: test\r\n"
        b"transfer-encoding: chunked\r\n\r\n"
        + b"%x\r\n%b\r\n" % (len(chunk), chunk) * 2
        + b"0\r\n\r\n"
    )
    answer = await read_answer(reader)
    assert answer.status == 413
    assert await closed_by_server(reader)


async def test_malformed_request_is_400_and_closes(server: LoopServer) -> None:
    reader, writer = await connect(server)
    writer.write(b"THIS IS NOT HTTP\r\n\r\n")
    answer = await read_answer(reader)
    assert answer.status == 400
    assert "malformed" in answer.json()["error"]["message"]  # type: ignore[index, operator]
    assert await closed_by_server(reader)


async def test_idle_connection_is_closed_and_a_slow_request_gets_408(
    server: LoopServer,
) -> None:
    reader, writer = await connect(server)
    writer.write(get("/healthz"))
    assert (await read_answer(reader)).status == 200
    # Idle past idle_timeout_s (1 s here; the sweep looks four times a second).
    assert await closed_by_server(reader)

    reader, writer = await connect(server)
    writer.write(b"GET /healthz HTTP/1.1\r\nhost: te")  # and nothing more
    answer = await read_answer(reader)
    assert answer.status == 408
    assert await closed_by_server(reader)


async def test_stop_closes_open_connections(server: LoopServer) -> None:
    reader, writer = await connect(server)
    writer.write(get("/healthz"))
    assert (await read_answer(reader)).status == 200
    await server.stop()
    assert await closed_by_server(reader)
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection(server.host, server.port)


def test_the_plain_lane_takes_one_whole_get_without_headers_to_read() -> None:
    lane = not_plain(NodeApp.read_headers)

    def plain(data: bytes, known: bytes | None = None) -> tuple[bytes, bytes] | None:
        return plain_get(data, lane, known)

    assert plain(get("/v1/tables/users/keys/user-1")) == (
        b"/v1/tables/users/keys/user-1",
        get("/")[len(b"GET / HTTP/1.1\r\n") :],
    )
    assert plain(get("/healthz", "User-Agent: x", "Accept: */*")) == (
        b"/healthz",
        get("/", "User-Agent: x", "Accept: */*")[len(b"GET / HTTP/1.1\r\n") :],
    )
    declined = [
        get("/v1/tables/users/range?limit=2"),  # a query
        get("/v1/tables/users/keys/user-1").replace(b"GET", b"HEAD"),
        get("/v1/tables/users/keys/user-1").replace(b"HTTP/1.1", b"HTTP/1.0"),
        get("/healthz")[:-2],  # not whole
        get("/healthz") + get("/healthz"),  # two requests
        get("/v1/tables/users/keys/a b"),  # a space in the target
        get("/healthz", "Content-Length: 0"),
        get("/healthz", "Transfer-Encoding: chunked"),
        get("/healthz", "Connection: close"),
        get("/healthz", "Expect: 100-continue"),
        get("/healthz", "Upgrade: h2c"),
        get("/healthz", "Authorization: Bearer t"),
        get("/healthz", "X-API-Key: k"),
        get("/healthz", "X-Request-Id: r"),
        get("/healthz", "X-Sparkiq-Hops: 1"),
        get("/healthz", "X-Sparkiq-Budget-Ms: 100"),
        get("/healthz", "x-sparkiq-cluster: s"),
        get("/healthz", "content-length : 0"),  # odd spelling: still the parser's
    ]
    known = plain(get("/healthz"))
    assert known is not None
    for request in declined:
        assert plain(request) is None, request
        # A header block found plain before is not looked through again; the rest still is.
        assert plain(request, known[1]) is None, request
    assert plain(get("/v1/tables/users/keys/user-1"), known[1]) == (
        b"/v1/tables/users/keys/user-1",
        known[1],
    )


# Paths a lane may take, whatever answers them: the key path or the generic path.
LANE_PATHS = [
    "/v1/tables/users/keys/user-2",  # a local key
    "/v1/tables/users/keys/nobody",  # absent: 404
    "/v1/tables/users/keys/a%2Fb",  # percent-encoded
    "/v1/tables/nope/keys/x",  # unknown table: declined to the generic path
    "/v1/tables/users/keys/",  # no key: the generic path
    "/v1/tables/users/range",  # the generic path, in a task
    "/healthz",
    "/nowhere",
]


@pytest.mark.parametrize("path", LANE_PATHS)
async def test_the_plain_lane_answers_as_the_parser_does(server: LoopServer, path: str) -> None:
    reader, writer = await connect(server)
    writer.write(get(path))  # the lane
    plain = await read_answer(reader)
    writer.write(get(path, "Connection: keep-alive"))  # the parser's way, same meaning
    parsed = await read_answer(reader)
    assert (plain.status, plain.body) == (parsed.status, parsed.body)
    del plain.headers["x-request-id"], parsed.headers["x-request-id"]
    assert plain.headers == parsed.headers
    writer.close()


async def test_plain_gets_after_a_declined_request_are_answered_the_same(
    server: LoopServer,
) -> None:
    # After a request the lane declines, the connection's next requests take the parser's
    # way for a while, then the lane's again: the answers do not change across the switch.
    reader, writer = await connect(server)
    writer.write(get("/v1/tables/users/keys/user-1", "X-Request-Id: declined-1"))
    first = await read_answer(reader)
    assert first.headers["x-request-id"] == "declined-1"
    for i in range(40):
        key = ("nobody", "user-1", "user-2")[i % 3]
        writer.write(get(f"/v1/tables/users/keys/{key}"))
        answer = await read_answer(reader)
        if key == "nobody":
            assert answer.status == 404, i
        else:
            assert answer.json()["value"] == {"n": i % 3}, i
        assert answer.headers["x-request-id"] != "declined-1"
    writer.close()


async def test_a_request_begun_in_one_read_is_finished_by_the_next(server: LoopServer) -> None:
    reader, writer = await connect(server)
    # The second read alone looks like a plain GET, but it is the rest of a header value.
    writer.write(b"GET /nowhere HTTP/1.1\r\nx-note: ")
    await writer.drain()
    await asyncio.sleep(0.2)
    writer.write(get("/v1/tables/users/keys/user-1"))
    answer = await read_answer(reader)
    assert answer.status == 404
    assert answer.json()["error"]["code"] == "no_route"  # type: ignore[index]
    writer.write(get("/v1/tables/users/keys/user-1"))  # then the lane again
    assert (await read_answer(reader)).json()["value"] == {"n": 1}
    writer.close()


def forwarded(path: str, request_id: str | None = None, hops: int = 1) -> bytes:
    """A GET as a node's pool forwards it (the node lane's shape)."""
    lines = [f"GET {path} HTTP/1.1", "host: test", f"x-sparkiq-hops: {hops}"]
    lines.append("x-sparkiq-budget-ms: 400")
    if request_id is not None:
        lines.append(f"x-request-id: {request_id}")
    return "\r\n".join([*lines, "", ""]).encode()


@pytest.mark.parametrize("path", LANE_PATHS)
async def test_the_node_lane_answers_as_the_parser_does(server: LoopServer, path: str) -> None:
    reader, writer = await connect(server)
    writer.write(forwarded(path, "lane-1"))  # the node lane
    lane = await read_answer(reader)
    # The same request with one header more: the parser's way, the same meaning.
    writer.write(forwarded(path, "lane-1").replace(b"\r\n\r\n", b"\r\naccept: */*\r\n\r\n"))
    parsed = await read_answer(reader)
    assert (lane.status, lane.body, lane.headers) == (parsed.status, parsed.body, parsed.headers)
    assert lane.headers["x-request-id"] == "lane-1"
    writer.close()


async def test_pipelined_forwards_are_answered_in_order_with_their_ids(
    server: LoopServer,
) -> None:
    reader, writer = await connect(server)
    paths = [
        "/v1/tables/users/keys/user-1",
        "/v1/tables/users/range?limit=2",  # a query: this read goes to the parser
        "/v1/tables/users/keys/nobody",
        "/v1/tables/users/keys/user-3",
    ]
    for batch in (paths, [p for p in paths if "?" not in p]):  # the second: all node lane
        writer.write(b"".join(forwarded(p, f"f-{i}") for i, p in enumerate(batch)))
        answers = [await read_answer(reader) for _ in batch]
        assert [a.headers["x-request-id"] for a in answers] == [f"f-{i}" for i in range(len(batch))]
        assert [a.status for a in answers] == [404 if "nobody" in p else 200 for p in batch]
        assert answers[0].json()["value"] == {"n": 1}
        assert answers[-1].json()["value"] == {"n": 3}
    # A node's connection may still send anything else: a plain GET, then a forward again.
    writer.write(get("/v1/tables/users/keys/user-2"))
    assert (await read_answer(reader)).json()["value"] == {"n": 2}
    writer.write(forwarded("/v1/tables/users/keys/user-4", "f-last"))
    last = await read_answer(reader)
    assert (last.json()["value"], last.headers["x-request-id"]) == ({"n": 4}, "f-last")
    writer.close()


async def test_a_forward_behind_a_waiting_request_waits_its_turn(server: LoopServer) -> None:
    reader, writer = await connect(server)
    writer.write(forwarded("/v1/tables/users/keys/user-1", "first"))
    assert (await read_answer(reader)).status == 200  # the connection is a node's now
    # A range (answered in a task) and a key in one read: the key is queued behind it.
    writer.write(
        forwarded("/v1/tables/users/range", "r") + forwarded("/v1/tables/users/keys/user-2", "k")
    )
    answers = [await read_answer(reader) for _ in range(2)]
    assert [a.headers["x-request-id"] for a in answers] == ["r", "k"]
    assert answers[1].json()["value"] == {"n": 2}
    writer.close()


# -- the connection limit and the header timeout ----------------------------------------------


async def answered(server: LoopServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection the server has counted: it answered a request on it."""
    reader, writer = await connect(server)
    writer.write(get("/v1/tables/users/keys/user-1"))
    assert (await read_answer(reader)).status == 200
    return reader, writer


async def refused_at_once(server: LoopServer) -> bytes:
    """Connect and read to the end: what a connection past the limit gets, within 1 s."""
    reader, writer = await connect(server)
    started = time.monotonic()
    try:
        data = await asyncio.wait_for(reader.read(), 1.0)
    except ConnectionResetError:
        data = b""
    assert time.monotonic() - started < 1.0
    writer.close()
    return data


def scraped(server: LoopServer) -> str:
    assert isinstance(server.app, NodeApp)
    return server.app.api.metrics.render().decode()


async def test_a_connection_past_the_limit_is_refused_at_once() -> None:
    async with serving(max_connections=3) as server:
        held = [await answered(server) for _ in range(3)]
        data = await refused_at_once(server)
        # An answer before the close, for a client that reads: 503, closed, retry later.
        assert data.startswith(b"HTTP/1.1 503 ")
        assert b"too_many_connections" in data
        assert b"retry-after: 1" in data
        assert b"connection: close" in data
        assert server.refused == 1
        # The connections within the limit are served as before.
        for i, (reader, writer) in enumerate(held):
            writer.write(get(f"/v1/tables/users/keys/user-{i}"))
            answer = await read_answer(reader)
            assert (answer.status, answer.json()["value"]) == (200, {"n": i})
        metrics = scraped(server)
        assert "sparkiq_http_connections 3.0" in metrics
        assert "sparkiq_http_connections_limit 3.0" in metrics
        assert "sparkiq_http_connections_refused_total 1.0" in metrics
        # A closed connection makes room for a new one.
        held.pop()[1].close()
        deadline = time.monotonic() + 5
        while len(server.connections) > 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        await answered(server)
        assert server.refused == 1
        for _, writer in held:
            writer.close()


async def test_refusals_are_logged_at_most_every_ten_seconds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with serving(max_connections=1) as server:
        _, writer = await answered(server)
        for _ in range(5):
            await refused_at_once(server)
        assert server.refused == 5
        writer.close()
        logged = [r for r in caplog.records if "connection limit reached" in r.getMessage()]
        assert len(logged) == 1
        assert "1 new connections refused" in logged[0].getMessage()


async def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout() -> None:
    async with serving(header_timeout_s=0.3, idle_timeout_s=30.0) as server:
        reader, _ = await connect(server)
        started = time.monotonic()
        assert await closed_by_server(reader)
        assert 0.3 <= time.monotonic() - started < 1.0
        assert server.timeouts["header"] == 1
        # One that has been answered is idle between requests: the idle timeout's.
        reader, writer = await answered(server)
        await asyncio.sleep(0.8)
        writer.write(get("/v1/tables/users/keys/user-2"))
        assert (await read_answer(reader)).json()["value"] == {"n": 2}
        assert server.timeouts == {"header": 1, "idle": 0, "request": 0}
        assert 'sparkiq_http_connection_timeouts_total{timeout="header"} 1.0' in scraped(server)
        writer.close()


async def test_a_request_begun_is_given_the_request_timeout_not_the_header_timeout() -> None:
    async with serving(header_timeout_s=0.3, request_timeout_s=1.0) as server:
        reader, _ = await connect(server)
        started = time.monotonic()
        reader_writer = await connect(server)
        reader_writer[1].write(b"GET /healthz HTTP/1.1\r\nhost: te")  # and nothing more
        answer = await read_answer(reader_writer[0])
        assert answer.status == 408
        assert time.monotonic() - started >= 1.0
        assert await closed_by_server(reader_writer[0])
        assert await closed_by_server(reader)  # the silent one went long before
        assert server.timeouts == {"header": 1, "idle": 0, "request": 1}


def test_the_default_connection_limit_follows_the_open_file_limit() -> None:
    # A third of what 256 other files and the listen backlog leave (the stores get the rest);
    # at least 128.
    assert default_max_connections(65_536) == (65_536 - OTHER_FILES - 1024) // 3 == 21_418
    assert default_max_connections(1_048_576) == (1_048_576 - 256 - 1024) // 3
    assert default_max_connections(4096) == (4096 - 256 - 1024) // 3
    assert default_max_connections(2048, backlog=128) == (2048 - 256 - 128) // 3
    assert default_max_connections(1000, backlog=0) == (1000 - 256) // 3
    assert default_max_connections(600) == MIN_CONNECTIONS
    assert default_max_connections(1024) == MIN_CONNECTIONS
    assert default_max_connections(0) == MIN_CONNECTIONS
    assert default_max_connections(-1) == default_max_connections(1 << 20)  # unlimited
    limits = range(0, 200_000, 997)
    defaults = [default_max_connections(n) for n in limits]
    assert defaults == sorted(defaults)
    # Two thirds are left for the stores once the limit is past a few thousand.
    for n, d in zip(limits, defaults, strict=True):
        budget = file_budget(n, 1024)
        assert budget.connections == d
        if n > 4096:
            assert budget.for_stores >= 2 * d
    # What a server takes when none is given: the default of this process's limit.
    assert connection_limit(None, 1024) == default_max_connections(open_file_limit(), 1024)
    assert connection_limit(7, 1024) == 7


async def test_a_server_without_a_limit_takes_the_default() -> None:
    async with serving() as server:
        assert server.max_connections == default_max_connections(open_file_limit())


def test_the_open_file_limit_is_raised_to_the_hard_limit() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard < 0 or hard <= 512:
        pytest.skip(f"hard open-file limit {hard}: nothing to raise to")
    code = (
        "import resource; from sparkiq.core.openfiles import raise_open_file_limit; "
        "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; "
        "resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard)); "
        "print(raise_open_file_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(hard), str(hard)]


def test_connection_settings_are_checked() -> None:
    for bad in (
        {"max_connections": 0},
        {"header_timeout_s": 0.0},
        {"idle_timeout_s": -1.0},
        {"request_timeout_s": 0.0},
    ):
        with pytest.raises(ConfigError):
            HttpSettings(**bad)  # type: ignore[arg-type]


async def test_the_server_takes_the_limit_and_timeouts_from_the_settings() -> None:
    settings = HttpSettings(
        max_connections=77, header_timeout_s=2.5, idle_timeout_s=40.0, request_timeout_s=9.0
    )
    port = free_port()
    loop = HttpServer(users_view(port), "127.0.0.1", port, settings)
    assert loop._loop_server.max_connections == 77
    assert (loop._loop_server._header_s, loop._loop_server._idle_s) == (2.5, 40.0)
    assert loop._loop_server._request_s == 9.0
    await loop.api.close()
