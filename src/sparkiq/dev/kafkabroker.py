"""Starts and stops Apache Kafka in KRaft mode on loopback: one node, or a cluster of three.

Each node is one JVM that is both broker and controller (`process.roles=broker,controller`),
run from the jars that `sparkiq.dev.jars` resolved from Maven Central, with its data, its
settings and its log in a directory of its own under the cluster's data directory. With
three nodes the topics sparkiq creates get replication factor 3 and `min.insync.replicas=2`
from the brokers' defaults, as in production.

The settings are Kafka's defaults but for what this machine and a test run need: a heap and
thread pools sized to share two cores with Spark and three serving nodes, and a session
timeout floor of one second, so tests can notice a killed node quickly.
Everything binds to the host given (127.0.0.1 by default) and is stopped by PID.

Secured, for the security tests: SCRAM-SHA-512 logins on a listener of their own (SASL), over
TLS when given a certificate (SASL_SSL), and ACLs enforced by Kafka's StandardAuthorizer. The
PLAINTEXT listener stays: it is the brokers' and the controller's own (their principal,
User:ANONYMOUS, is a super user), not one for clients of a secured cluster.
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from sparkiq.core.errors import BrokerError
from sparkiq.dev.jars import KAFKA, install_jars, java_executable
from sparkiq.dev.ports import free_port
from sparkiq.dev.processes import signal_process, stop_process

# Heap per node. Kafka's scripts default to 1 GB; a test cluster holds a few thousand small
# partitions at most, and the machine's memory is shared with Spark and the nodes.
HEAP_MB = {1: 512, 3: 384}

_JVM_OPTIONS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)

_LOG4J2 = """\
Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
    Logger:
      # Every refused operation, one line each (who, what, which resource): what a role
      # lacks shows in the node's log.
      - name: kafka.authorizer.logger
        level: INFO
      - name: kafka.server.KafkaRaftServer
        level: INFO
      - name: kafka.server.BrokerServer
        level: INFO
"""


def _node_settings(nodes: int) -> dict[str, str]:
    """The settings every node of a cluster of *nodes* shares (listeners come per node)."""
    replicas = str(min(nodes, 3))
    isr = "2" if nodes >= 3 else "1"
    return {
        "process.roles": "broker,controller",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        # Topics sparkiq creates take the brokers' replication defaults.
        "default.replication.factor": replicas,
        "min.insync.replicas": isr,
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": isr,
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": isr,
        # Sessions as short as one second allowed (Kafka's floor is 6 s), so that tests can
        # have serving nodes notice a killed peer within seconds. A new group's first
        # rebalance still waits Kafka's 3 s for more members, as in production: nodes
        # started together share the first assignment.
        "group.min.session.timeout.ms": "1000",
        # Sized for two cores shared with Spark and the nodes (Kafka's defaults: 3, 8, 10).
        "num.network.threads": "2",
        "num.io.threads": "4",
        "background.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(32 * 1024 * 1024),
    }


# A SASL_PLAINTEXT listener named SASL taking SCRAM-SHA-512 logins (users are created when the
# storage is formatted); the brokers talk to each other over PLAINTEXT.
_SASL_SETTINGS = {
    "listener.security.protocol.map": (
        "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL:SASL_PLAINTEXT"
    ),
    "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    "listener.name.sasl.scram-sha-512.sasl.jaas.config": (
        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    ),
}


# Kafka's ACLs: every request is authorized by the StandardAuthorizer (KRaft's own); what no
# ACL allows is refused. The brokers and the controller talk over PLAINTEXT as User:ANONYMOUS,
# which must be a super user, as must the admins who grant the others their rights.
_ACL_SETTINGS = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "false",
}


def _tls_settings(keystore: Path) -> dict[str, str]:
    """The SASL listener over TLS: its certificate chain and key in one PEM file."""
    return {
        "listener.security.protocol.map": (
            "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL:SASL_SSL"
        ),
        "listener.name.sasl.ssl.keystore.type": "PEM",
        "listener.name.sasl.ssl.keystore.location": str(keystore),
        "listener.name.sasl.ssl.client.auth": "none",
    }


def _new_cluster_id() -> str:
    """16 random bytes in URL-safe base64 without padding, as Kafka's `Uuid.randomUuid`;
    never starting with '-', which the storage tool would read as an option (Kafka's own ids
    avoid it for the same reason)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _java_failure(output: str) -> str:
    """The line of a JVM's output that says why it failed (its exception), not the stack."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if "Exception" in line and not line.startswith("at "):
            return line
    return lines[-1] if lines else "no output"


@dataclass
class _Node:
    node_id: int
    port: int
    controller_port: int
    home: Path
    sasl_port: int | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.home / "server.log"

    @property
    def config_path(self) -> Path:
        return self.home / "server.properties"

    @property
    def data_path(self) -> Path:
        return self.home / "data"


@dataclass
class KafkaBroker:
    """Apache Kafka (KRaft) on *host*: `nodes` combined broker+controller JVMs (1 or 3).

    Use as a context manager or call `start`/`stop`. *data_dir* keeps the data (and the
    ports, in ``cluster.json``) for a later start; without it the cluster lives in a fresh
    temporary directory that a clean stop removes. *settings* override broker settings.
    *scram_users* (name -> password) adds a SASL_PLAINTEXT listener on each node that takes
    SCRAM-SHA-512 logins of those users only (`sasl_bootstrap_servers`); the PLAINTEXT
    listener stays, for the brokers themselves and for tests that need no login.
    *tls_cert_file* and *tls_key_file* (PEM; the certificate chain for the host, an
    unencrypted PKCS#8 key) make that listener SASL_SSL. *acls* enforces ACLs
    (`allow.everyone.if.no.acl.found=false`): only the *super_users* (SCRAM user names) and
    the brokers themselves may do anything no ACL grants; grant the others with
    `sparkiq.dev.acls.create_acls` as a super user.
    """

    nodes: int = 1
    host: str = "127.0.0.1"
    data_dir: Path | None = None
    settings: Mapping[str, str] = field(default_factory=dict)
    scram_users: Mapping[str, str] = field(default_factory=dict)
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    acls: bool = False
    super_users: Sequence[str] = ()
    heap_mb: int | None = None
    startup_timeout_s: float = 90.0
    progress: Callable[[str], None] | None = None
    _nodes: list[_Node] = field(default_factory=list, init=False, repr=False)
    _own_dir: bool = field(default=False, init=False, repr=False)
    _cluster_id: str = field(default="", init=False, repr=False)
    _classpath: str = field(default="", init=False, repr=False)
    _java: str = field(default="", init=False, repr=False)

    kind = "kafka"

    def __post_init__(self) -> None:
        if self.nodes not in (1, 3):
            raise BrokerError(f"an Apache Kafka cluster here has 1 or 3 nodes, not {self.nodes}")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise BrokerError("TLS needs both tls_cert_file and tls_key_file")
        if self.tls_cert_file is not None and not self.scram_users:
            raise BrokerError("the TLS listener is the SASL one: give scram_users too")
        unknown = sorted(set(self.super_users) - set(self.scram_users))
        if unknown:
            raise BrokerError(f"super users {unknown} are not among the scram_users")

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.host}:{n.port}" for n in self._nodes)

    @property
    def sasl_protocol(self) -> str:
        """The SASL listener's ``security.protocol``: SASL_SSL with a certificate."""
        return "SASL_PLAINTEXT" if self.tls_cert_file is None else "SASL_SSL"

    @property
    def sasl_bootstrap_servers(self) -> str:
        """The SCRAM listeners (with *scram_users* only)."""
        if not self.scram_users:
            raise BrokerError("this cluster has no SASL listener; start it with scram_users")
        return ",".join(f"{self.host}:{n.sasl_port}" for n in self._nodes)

    @property
    def pid(self) -> int | None:
        """The first node's PID (the only one of a one-node cluster)."""
        pids = self.pids
        return pids[0] if pids else None

    @property
    def pids(self) -> list[int]:
        return [n.proc.pid for n in self._nodes if n.proc is not None]

    @property
    def node_ids(self) -> list[int]:
        return [n.node_id for n in self._nodes]

    @property
    def log_paths(self) -> list[Path]:
        return [n.log_path for n in self._nodes]

    def describe(self) -> str:
        shape = "1 node" if self.nodes == 1 else f"{self.nodes} nodes"
        pids = ", ".join(str(p) for p in self.pids)
        return (
            f"Apache Kafka {KAFKA.version} (KRaft, {shape}) on {self.bootstrap_servers} "
            f"(pid {pids}); data and logs in {self.data_dir}"
        )

    # ---- life cycle ------------------------------------------------------------------------

    def start(self) -> KafkaBroker:
        if self.pids:
            return self
        self._java = java_executable()
        jars = install_jars(KAFKA, progress=self.progress or (lambda _line: None))
        self._classpath = os.pathsep.join(str(j) for j in jars)
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="sparkiq-kafka-"))
            self._own_dir = True
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._lay_out()
            for node in self._nodes:
                self._launch(node)
            self._wait_until_ready()
        except BaseException:
            self._stop_nodes(kill=True)
            raise
        return self

    def stop(self, *, grace_s: float = 10.0) -> None:
        """SIGTERM every node (a controlled shutdown), SIGKILL what is left after *grace_s*.
        A cluster in a directory this object made is killed at once and the directory
        removed: its data is thrown away, so a controlled shutdown would only cost time."""
        self._stop_nodes(kill=self._own_dir, grace_s=grace_s)
        if self._own_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
            self._own_dir = False

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node (its data stays; `start_node` brings it back)."""
        node = self._node(node_id)
        if node.proc is not None:
            stop_process(node.proc, kill=True, grace_s=5.0, timeout_s=10.0)
            node.proc = None

    def stop_node(self, node_id: int, *, grace_s: float = 30.0) -> None:
        """SIGTERM one node: it hands its leaderships over before it exits."""
        node = self._node(node_id)
        if node.proc is not None:
            stop_process(node.proc, grace_s=grace_s, timeout_s=10.0)
            node.proc = None

    def start_node(self, node_id: int) -> None:
        """Start a stopped node again on its ports, from its data."""
        node = self._node(node_id)
        if node.proc is None:
            self._launch(node)

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- inside ----------------------------------------------------------------------------

    def _node(self, node_id: int) -> _Node:
        for node in self._nodes:
            if node.node_id == node_id:
                return node
        raise BrokerError(f"no node {node_id} in this cluster (nodes {self.node_ids})")

    def _lay_out(self) -> None:
        """Ports, settings and formatted data directories of every node; a data directory
        used before keeps its cluster id and ports."""
        assert self.data_dir is not None
        layout_file = self.data_dir / "cluster.json"
        if layout_file.is_file():
            layout = json.loads(layout_file.read_text())
            if len(layout["nodes"]) != self.nodes:
                raise BrokerError(
                    f"{self.data_dir} holds a cluster of {len(layout['nodes'])} nodes, not "
                    f"{self.nodes}; pass that number or another --data-dir"
                )
            self._cluster_id = layout["cluster_id"]
            ports = [(n["port"], n["controller_port"], n.get("sasl_port")) for n in layout["nodes"]]
        else:
            self._cluster_id = _new_cluster_id()
            ports = []
            taken: set[int] = set()
            for _ in range(self.nodes):
                picked: list[int] = []
                while len(picked) < 3:
                    port = free_port(self.host)
                    if port not in taken:
                        taken.add(port)
                        picked.append(port)
                ports.append((picked[0], picked[1], picked[2] if self.scram_users else None))
        self._nodes = [
            _Node(i + 1, port, cport, self.data_dir / f"node-{i + 1}", sasl_port=sport)
            for i, (port, cport, sport) in enumerate(ports)
        ]
        if self.scram_users and any(n.sasl_port is None for n in self._nodes):
            raise BrokerError(
                f"{self.data_dir} holds a cluster made without a SASL listener; use another "
                "--data-dir"
            )
        voters = ",".join(f"{n.node_id}@{self.host}:{n.controller_port}" for n in self._nodes)
        shared = {**_node_settings(self.nodes), "controller.quorum.voters": voters}
        to_format = []
        for node in self._nodes:
            node.home.mkdir(parents=True, exist_ok=True)
            listeners = [
                f"PLAINTEXT://{self.host}:{node.port}",
                f"CONTROLLER://{self.host}:{node.controller_port}",
            ]
            advertised = [f"PLAINTEXT://{self.host}:{node.port}"]
            if node.sasl_port is not None:
                listeners.append(f"SASL://{self.host}:{node.sasl_port}")
                advertised.append(f"SASL://{self.host}:{node.sasl_port}")
            own = {
                "node.id": str(node.node_id),
                "listeners": ",".join(listeners),
                "advertised.listeners": ",".join(advertised),
                "log.dirs": str(node.data_path),
            }
            if node.sasl_port is not None:
                own.update(_SASL_SETTINGS)
                if self.tls_cert_file is not None and self.tls_key_file is not None:
                    keystore = node.home / "keystore.pem"
                    keystore.write_bytes(
                        self.tls_key_file.read_bytes() + self.tls_cert_file.read_bytes()
                    )
                    own.update(_tls_settings(keystore))
            if self.acls:
                supers = ["User:ANONYMOUS", *(f"User:{name}" for name in self.super_users)]
                own.update({**_ACL_SETTINGS, "super.users": ";".join(supers)})
            text = "".join(f"{k}={v}\n" for k, v in {**shared, **own, **self.settings}.items())
            node.config_path.write_text(text)
            (node.home / "log4j2.yaml").write_text(_LOG4J2)
            if not (node.data_path / "meta.properties").is_file():
                to_format.append(node)
        layout_file.write_text(
            json.dumps(
                {
                    "cluster_id": self._cluster_id,
                    "nodes": [
                        {
                            "port": n.port,
                            "controller_port": n.controller_port,
                            "sasl_port": n.sasl_port,
                        }
                        for n in self._nodes
                    ],
                }
            )
        )
        # Each format is a JVM start (~1 s); the nodes' are independent.
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(to_format) or 1) as pool:
            for future in [pool.submit(self._format, n) for n in to_format]:
                future.result()

    def _java_command(self, node: _Node, heap_mb: int, main: str, *args: str) -> list[str]:
        return [
            self._java,
            f"-Xms{heap_mb}m",
            f"-Xmx{heap_mb}m",
            *_JVM_OPTIONS,
            f"-Dlog4j2.configurationFile={node.home / 'log4j2.yaml'}",
            "-cp",
            self._classpath,
            main,
            *args,
        ]

    def _format(self, node: _Node) -> None:
        command = self._java_command(
            node,
            128,
            "kafka.tools.StorageTool",
            "format",
            "--cluster-id",
            self._cluster_id,
            "--config",
            str(node.config_path),
            "--ignore-formatted",
            *(
                arg
                for name, password in self.scram_users.items()
                for arg in ("--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]")
            ),
        )
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise BrokerError(
                f"formatting node {node.node_id}'s storage in {node.data_path} failed "
                f"(exit {done.returncode}): {_java_failure(done.stderr + done.stdout)}"
            )

    def _launch(self, node: _Node) -> None:
        heap = self.heap_mb or HEAP_MB[self.nodes]
        log = node.log_path.open("ab")
        try:
            node.proc = subprocess.Popen(
                self._java_command(node, heap, "kafka.Kafka", str(node.config_path)),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            log.close()

    def _wait_until_ready(self) -> None:
        """Until every node answers and the cluster's metadata lists all of them."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.startup_timeout_s
        last_error = "no answer"
        while time.monotonic() < deadline:
            for node in self._nodes:
                assert node.proc is not None
                if node.proc.poll() is not None:
                    said = _java_failure(node.log_path.read_text(errors="replace")[-20_000:])
                    raise BrokerError(
                        f"Apache Kafka node {node.node_id} exited with code "
                        f"{node.proc.returncode} at start-up ({said}); see {node.log_path}"
                    )
            try:
                admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
                brokers = admin.list_topics(timeout=2).brokers
                if len(brokers) == self.nodes:
                    return
                last_error = f"{len(brokers)} of {self.nodes} brokers registered"
            except Exception as exc:
                last_error = str(exc)
            time.sleep(0.2)
        raise BrokerError(
            f"Apache Kafka on {self.bootstrap_servers} was not ready within "
            f"{self.startup_timeout_s:.0f}s ({last_error}); see {self.log_paths[0]}"
        )

    def _stop_nodes(self, *, kill: bool, grace_s: float = 10.0) -> None:
        procs = [n.proc for n in self._nodes if n.proc is not None]
        # All at once: a node stopped alone while the others run waits for them to take
        # over its partitions, which a cluster being torn down never needs.
        for proc in procs:
            signal_process(proc, signal.SIGKILL if kill else signal.SIGTERM)
        for proc in procs:
            stop_process(proc, kill=kill, grace_s=grace_s, timeout_s=10.0)
        for node in self._nodes:
            node.proc = None
