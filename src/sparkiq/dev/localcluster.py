"""Starts and stops serving-node processes on loopback, for the demo, tests and benchmarks.

Each node is a `sparkiq serve` child process with its own port and state directory; it is
stopped by its PID (SIGTERM for a graceful stop, SIGKILL to simulate a crash).
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from sparkiq.core.errors import SparkiqError
from sparkiq.dev.ports import free_port
from sparkiq.dev.processes import signal_process, spawn_sparkiq, stop_process
from sparkiq.http.tls import client_context


@dataclass
class NodeProcess:
    """One `sparkiq serve` child process."""

    port: int
    state_dir: Path
    bootstrap_servers: str
    app: str
    log_path: Path
    extra_args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)  # on top of this process's environment
    # How the node authenticates callers: none unless told otherwise (e.g. "--jwt-secret-file",
    # path, "--cluster-secret-file", path); `headers` are what this harness sends with its own
    # probes (readiness, metadata) to such a node.
    auth_args: Sequence[str] = ("--auth", "none")
    headers: Mapping[str, str] = field(default_factory=dict)
    # With TLS: the CA that signed the node's certificate (the node's TLS options go in
    # extra_args); the URL is then https://.
    ca_file: Path | None = None
    # Where the node binds (default 127.0.0.1) and the host this harness reaches it at; a
    # node on another (network-namespace) host binds e.g. 0.0.0.0 and is reached at its
    # address there, started through `prefix` (see `spawn_sparkiq`).
    listen_host: str = "127.0.0.1"
    host: str = "127.0.0.1"
    prefix: Sequence[str] = ()
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        scheme = "https" if self.ca_file is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    def http_get(self, path: str, timeout_s: float) -> httpx.Response:
        """GET `path` of this node with the harness's credentials and trust."""
        verify = client_context(self.ca_file) if self.ca_file is not None else True
        return httpx.get(
            f"{self.url}{path}", headers=dict(self.headers), timeout=timeout_s, verify=verify
        )

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> NodeProcess:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.proc = spawn_sparkiq(
            [
                "serve",
                "--bootstrap-servers",
                self.bootstrap_servers,
                "--app",
                self.app,
                "--listen",
                f"{self.listen_host}:{self.port}",
                "--state-dir",
                str(self.state_dir),
                *self.auth_args,
                *self.extra_args,
            ],
            self.log_path,
            env=self.env,
            prefix=self.prefix,
        )
        return self

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self) -> None:
        """SIGTERM by PID, not waiting: the node stops gracefully (`stop` waits for it)."""
        if self.proc is not None:
            signal_process(self.proc, signal.SIGTERM)

    def stop(self, *, kill: bool = False, timeout_s: float = 20.0) -> None:
        """SIGTERM (graceful) or SIGKILL (crash) by PID, then wait for the exit."""
        proc = self.proc
        if proc is None:
            return
        stop_process(proc, kill=kill, grace_s=timeout_s, timeout_s=timeout_s)
        self.proc = None

    def is_ready(self) -> bool:
        try:
            return self.http_get("/readyz", 1.0).status_code == 200
        except httpx.HTTPError:
            return False


class LocalCluster:
    """N serving nodes on loopback sharing one broker and app id."""

    def __init__(
        self,
        bootstrap_servers: str,
        base_dir: Path,
        *,
        nodes: int = 3,
        app: str = "sparkiq",
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        auth_args: Sequence[str] = ("--auth", "none"),
        headers: Mapping[str, str] | None = None,
        ca_file: Path | None = None,
    ) -> None:
        """`auth_args`, `headers`, `ca_file`: see `NodeProcess`."""
        self.bootstrap_servers = bootstrap_servers
        self.base_dir = base_dir
        self.app = app
        self.auth_args = tuple(auth_args)
        self.headers = dict(headers or {})
        self.ca_file = ca_file
        self.extra_args = tuple(extra_args)
        self.env = dict(env or {})  # e.g. SPARKIQ_SESSION_TIMEOUT_MS for every node
        self.nodes: list[NodeProcess] = [self._new_node(i) for i in range(nodes)]

    def _new_node(self, index: int) -> NodeProcess:
        return NodeProcess(
            port=free_port(),
            state_dir=self.base_dir / f"node{index}" / "state",
            bootstrap_servers=self.bootstrap_servers,
            app=self.app,
            log_path=self.base_dir / f"node{index}.log",
            extra_args=self.extra_args,
            env=self.env,
            auth_args=self.auth_args,
            headers=self.headers,
            ca_file=self.ca_file,
        )

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def start(self) -> LocalCluster:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        for node in self.nodes:
            node.start()
        return self

    def add_node(self) -> NodeProcess:
        node = self._new_node(len(self.nodes)).start()
        self.nodes.append(node)
        return node

    def wait_ready(
        self,
        timeout_s: float = 60.0,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """Wait until every running node answers /readyz with 200 and all agree on the map."""
        deadline = time.monotonic() + timeout_s
        running = [n for n in self.nodes if n.is_running()]
        while True:
            dead = [n for n in self.nodes if n.proc is not None and not n.is_running()]
            if dead:
                raise SparkiqError(f"node {dead[0].url} exited; see its log {dead[0].log_path}")
            ready = sum(1 for n in running if n.is_ready())
            if progress is not None:
                progress(ready, len(running))
            if ready == len(running) and self._maps_agree(running):
                return
            if time.monotonic() >= deadline:
                logs = ", ".join(str(n.log_path) for n in running)
                raise SparkiqError(
                    f"{ready} of {len(running)} nodes ready after {timeout_s:.0f}s; "
                    f"see the node logs: {logs}"
                )
            time.sleep(0.2)

    def wait_settled(self, timeout_s: float = 60.0) -> None:
        """`wait_ready`, then until the map holds exactly the running nodes, no partition is
        warming and every replica is caught up.

        Caught up: every running node's replicas are active or standby (none restoring) and
        at their changelog end, with a store that has applied something (a replica that has
        not fetched yet reports lag 0 at position 0). For clusters whose partitions all hold
        records, e.g. before scaling in further.
        """
        deadline = time.monotonic() + timeout_s
        self.wait_ready(timeout_s)
        running = [n for n in self.nodes if n.is_running()]
        urls = {n.url for n in running}
        while not all(self._settled(n, urls) for n in running):
            if time.monotonic() >= deadline:
                raise SparkiqError(f"cluster not settled after {timeout_s:.0f}s")
            time.sleep(0.2)
        self.wait_ready(max(deadline - time.monotonic(), 1.0))

    def wait_moved(self, timeout_s: float = 60.0) -> None:
        """`wait_ready`, then until no running node's map has a partition warming (the moves
        to warmed-up replicas are over: each ends in a new map without it) and the maps agree.

        Unlike `wait_settled`, asks nothing of the replicas' positions, so it suits a table
        with empty partitions; lookups in the meantime may meet a move's rebalance.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            self.wait_ready(max(deadline - time.monotonic(), 1.0))
            running = [n for n in self.nodes if n.is_running()]
            if not any(self._warming(n) for n in running) and self._maps_agree(running):
                return
            if time.monotonic() >= deadline:
                raise SparkiqError(f"a partition still warming after {timeout_s:.0f}s")
            time.sleep(0.2)

    @staticmethod
    def _warming(node: NodeProcess) -> bool:
        """Whether *node*'s map has a partition warming (True when it cannot be asked)."""
        try:
            meta = node.http_get("/v1/metadata", 2.0).json()
        except (httpx.HTTPError, ValueError):
            return True
        return _any_warming(meta)

    @staticmethod
    def _settled(node: NodeProcess, urls: set[str]) -> bool:
        try:
            meta = node.http_get("/v1/metadata", 2.0).json()
        except (httpx.HTTPError, ValueError):
            return False
        if {n["url"] for n in meta.get("nodes", [])} != urls:
            return False  # the map still names a node that is gone (or misses one)
        if _any_warming(meta):
            return False
        return all(
            r["state"] in ("active", "standby") and r["lag"] == 0 and r["position"] > 0
            for r in meta.get("local", [])
        )

    @staticmethod
    def _maps_agree(nodes: Sequence[NodeProcess]) -> bool:
        generations = set()
        for node in nodes:
            try:
                meta = node.http_get("/v1/metadata", 2.0).json()
            except (httpx.HTTPError, ValueError):
                return False
            members = {n["url"] for n in meta.get("nodes", [])}
            if not {n.url for n in nodes} <= members:
                return False
            generations.add(meta.get("generation"))
        return len(generations) == 1

    def stop(self) -> None:
        """Stop every node gracefully, all at once (`stop_nodes`)."""
        stop_nodes(self.nodes)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _any_warming(meta: Mapping[str, Any]) -> bool:
    """Whether a node's /v1/metadata has a partition warming."""
    return any(p.get("warming") for p in meta.get("partitions", []))


def stop_nodes(nodes: Sequence[NodeProcess]) -> None:
    """Stop *nodes* gracefully, all at once: each is told (SIGTERM) before any is waited
    for. One after another, a node told to stop while the one before it is leaving the
    group (a rebalance) took ~8 s to leave; told at once, three were gone in half a second.
    """
    for node in nodes:
        node.terminate()
    for node in nodes:
        node.stop()
