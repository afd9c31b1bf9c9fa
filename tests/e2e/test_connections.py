"""End to end: a node bounds its connections and sheds idle ones, and keeps serving.

One `sparkiq serve` process with `--max-connections 2000 --header-timeout-s 2` and a seeded
table. The test opens 10,000 TCP connections to it that never send a byte, over ~3 s (from
a thread of its own). While they open, keys are read over one keep-alive connection made
before: every answer must be the oracle's, and the node must stay in its group (`/readyz`
200, listed in `/v1/metadata`). Past 2,000 the node must refuse connections at once (503
and closed: `sparkiq_http_connections_refused_total`), and close the idle ones it accepted
once the header timeout has passed (`sparkiq_http_connection_timeouts_total{timeout=
"header"}`), which makes room for later ones: every idle connection must have been refused
or closed within `SHED_WITHIN_S` of the last one's opening. The node's open descriptors
must stay below what it held before plus the limit plus the listen backlog (connections
accepted in one loop turn before they are counted). Once the idle connections are gone,
new connections are served again: every key is read once more over fresh connections.
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
import re
import resource
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest

from sparkiq.core.tables import TableDef
from sparkiq.dev.localcluster import NodeProcess
from sparkiq.dev.ports import free_port
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from tests.support.e2e import Oracle, fetch_all, mismatches, produce_seeded

pytestmark = pytest.mark.e2e

IDLE_SOCKETS = 10_000
MAX_CONNECTIONS = 2_000
HEADER_TIMEOUT_S = 2.0
BACKLOG = 1024  # the node's listen backlog (HttpServer's default)
READS = 500  # key reads while the idle connections open, at least
# The idle connections open this many at a time, every PACE_S: over ~3 s, so that the first
# ones reach the header timeout while the last ones arrive.
AT_ONCE = 500
PACE_S = 0.15
# Every idle connection must have been refused or closed this long after the last opened.
SHED_WITHIN_S = HEADER_TIMEOUT_S + 5.0
# Descriptors the test process needs besides the idle sockets.
OWN_FILES = 2_000


def wait_for(what: str, check: Any, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def raise_own_file_limit() -> None:
    """Room for the idle sockets in this process, or skip."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = IDLE_SOCKETS + OWN_FILES
    if 0 <= hard < needed:
        pytest.skip(f"the hard open-file limit ({hard}) is below the {needed} this test needs")
    if 0 <= soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@pytest.fixture(scope="module")
def setup(
    bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[NodeProcess, Oracle]]:
    raise_own_file_limit()
    app = f"e2econn{int(time.time() * 1000) % 10**9}"
    topic = f"{app}-items"
    create_topic(bootstrap, topic, 4)
    oracle = produce_seeded(bootstrap, topic, keys=2_000, updates=2, deletes=100, seed=11)
    register_table(bootstrap, TableDef("items", topic, 4), app=app)
    base: Path = tmp_path_factory.mktemp("connections")
    node = NodeProcess(
        port=free_port(),
        state_dir=base / "node",
        bootstrap_servers=bootstrap,
        app=app,
        log_path=base / "node.log",
        extra_args=(
            "--max-connections",
            str(MAX_CONNECTIONS),
            "--header-timeout-s",
            str(HEADER_TIMEOUT_S),
        ),
    )
    try:
        node.start()
        wait_for("the node ready", node.is_ready)
        yield node, oracle
    finally:
        node.stop()


class KeepAlive:
    """One HTTP/1.1 connection, kept open, one request at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, node: NodeProcess) -> KeepAlive:
        reader, writer = await asyncio.open_connection(node.host, node.port)
        return cls(reader, writer)

    async def get(self, path: str) -> tuple[int, bytes]:
        self.writer.write(f"GET {path} HTTP/1.1\r\nhost: test\r\n\r\n".encode())
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 10)
        lines = head.decode("latin-1").split("\r\n")
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        body = await asyncio.wait_for(self.reader.readexactly(length), 10) if length else b""
        return int(lines[0].split(" ")[1]), body

    async def json(self, path: str) -> tuple[int, Any]:
        status, body = await self.get(path)
        return status, orjson.loads(body)

    async def metrics(self) -> dict[str, float]:
        status, body = await self.get("/metrics")
        assert status == 200
        out = {}
        for match in re.finditer(rb"^(sparkiq_http_conn[^ ]*) ([0-9.e+]+)$", body, re.M):
            out[match.group(1).decode()] = float(match.group(2))
        return out

    def close(self) -> None:
        self.writer.close()


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class FilesWatch:
    """The most descriptors process `pid` held while this was entered, read every 2 ms."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(0.002):
            self.most = max(self.most, open_files(self.pid))

    def __enter__(self) -> FilesWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def open_idle_sockets(host: str, port: int, out: list[socket.socket]) -> None:
    """`IDLE_SOCKETS` connected non-blocking sockets that will never send anything, into
    `out`, opened `AT_ONCE` at a time every `PACE_S` (in this thread's own loop)."""

    async def one() -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        out.append(sock)
        await asyncio.get_running_loop().sock_connect(sock, (host, port))

    async def all_of_them() -> None:
        for start in range(0, IDLE_SOCKETS, AT_ONCE):
            await asyncio.gather(*(one() for _ in range(min(AT_ONCE, IDLE_SOCKETS - start))))
            await asyncio.sleep(PACE_S)

    asyncio.run(all_of_them())


def ended(sock: socket.socket) -> bool:
    """Whether the node has closed `sock` (EOF or reset; a refusal's 503 read first)."""
    while True:
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return False
        except OSError as exc:
            return exc.errno in (errno.ECONNRESET, errno.EPIPE)
        if not data:
            return True


def test_a_flood_of_idle_connections_is_shed_and_reads_stay_right(
    setup: tuple[NodeProcess, Oracle],
) -> None:
    node, oracle = setup
    assert node.pid is not None
    pid = node.pid
    keys = sorted(oracle.latest) + sorted(oracle.deleted)
    sample = random.Random(5).sample(keys, READS)
    before = open_files(pid)
    idle: list[socket.socket] = []

    async def run() -> dict[str, Any]:
        client = await KeepAlive.open(node)
        assert (await client.get("/readyz"))[0] == 200  # counted before the flood
        limit = (await client.metrics())["sparkiq_http_connections_limit"]
        assert limit == MAX_CONNECTIONS, "the node did not take --max-connections"
        flooding = asyncio.create_task(
            asyncio.to_thread(open_idle_sockets, node.host, node.port, idle)
        )
        answers: dict[str, tuple[int, Any]] = {}
        wrong: list[str] = []
        reads = during_flood = 0
        membership_checks = 0
        while not flooding.done() or reads < READS:
            key = sample[reads % READS]
            answers = {key: await client.json(f"/v1/tables/items/keys/{quote(key, safe='')}")}
            wrong += mismatches(answers, oracle)
            reads += 1
            if reads % 50 == 0:
                assert (await client.get("/readyz"))[0] == 200
                status, meta = await client.json("/v1/metadata")
                assert status == 200
                assert node.url in [n["url"] for n in meta["nodes"]]
                membership_checks += 1
            if not flooding.done():
                during_flood = reads
        await flooding
        assert len(idle) == IDLE_SOCKETS
        opened_at = time.monotonic()
        during = await client.metrics()
        # Every idle connection is refused, or closed once the header timeout has passed.
        while not all(ended(sock) for sock in idle):
            assert time.monotonic() - opened_at < SHED_WITHIN_S, (
                f"{sum(not ended(s) for s in idle)} idle connections still open "
                f"{SHED_WITHIN_S:g} s after the last one opened"
            )
            await asyncio.sleep(0.2)
        shed_s = time.monotonic() - opened_at
        after = await client.metrics()
        # The node took the reader's reads all along, and is still in its group.
        assert (await client.get("/readyz"))[0] == 200
        status, meta = await client.json("/v1/metadata")
        assert status == 200
        assert node.url in [n["url"] for n in meta["nodes"]]
        client.close()
        return {
            "reads": reads,
            "during_flood": during_flood,
            "wrong": wrong,
            "membership_checks": membership_checks,
            "during": during,
            "after": after,
            "shed_s": shed_s,
        }

    try:
        with FilesWatch(pid) as files:
            result = asyncio.run(run())
    finally:
        for sock in idle:
            sock.close()
    assert result["wrong"] == [], result["wrong"][:5]
    assert result["during_flood"] >= READS
    assert result["membership_checks"] >= READS // 50
    during, after = result["during"], result["after"]
    assert during["sparkiq_http_connections_limit"] == MAX_CONNECTIONS
    # 10,000 idle connections against a limit of 2,000: most were refused at once.
    assert after["sparkiq_http_connections_refused_total"] > 0
    header_closed = after['sparkiq_http_connection_timeouts_total{timeout="header"}']
    assert header_closed > 0
    # Each idle connection was either refused or closed by the header timeout.
    assert after["sparkiq_http_connections_refused_total"] + header_closed >= IDLE_SOCKETS
    assert after["sparkiq_http_connections"] <= 2  # the reader (and a straggler at most)
    assert result["shed_s"] < SHED_WITHIN_S
    # The node's descriptors: what it held before, the limit, one backlog's worth.
    assert files.most < before + MAX_CONNECTIONS + BACKLOG, files.most
    # New connections are served again: every key, over fresh connections.
    answers = asyncio.run(fetch_all(node.url, "items", keys))
    assert len(answers) == len(keys)
    assert mismatches(answers, oracle) == []
    assert node.is_ready()
