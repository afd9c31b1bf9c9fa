"""Runs a pipeline file as a `sparkiq run` child process, for the demo, tests and benchmarks.

The child writes its queries' progress to a status file; `PipelineProcess.caught_up` compares
the offsets every query has processed with the true end of its source topics, which is how
the demo and the tests know the tables reflect everything produced so far. The process runs
in its own session: a graceful stop signals its PID (the runner stops the queries, which
resume from their checkpoints), a crash (`kill=True`) SIGKILLs its whole process group, the
Spark JVM and Python workers included, as a lost machine would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkiq.dev.processes import spawn_sparkiq, stop_process
from sparkiq.kafka.admin import partition_count
from sparkiq.kafka.offsets import true_end_offsets
from sparkiq.kafka.security import KafkaSecurity


@dataclass
class PipelineProcess:
    """One `sparkiq run PIPELINE_FILE` child process."""

    pipeline_file: Path
    bootstrap_servers: str
    checkpoint_dir: Path
    log_path: Path
    app: str = "sparkiq"
    params: Mapping[str, str] = field(default_factory=dict)
    # Kafka security settings file (`--kafka-config`): a file, so no password shows in the
    # child's command line.
    kafka_config: Path | None = None
    extra_args: Sequence[str] = ()
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def status_path(self) -> Path:
        return self.checkpoint_dir / "status.json"

    @property
    def security(self) -> KafkaSecurity:
        """The Kafka security settings the pipeline and `caught_up` connect with."""
        return KafkaSecurity.load(self.kafka_config)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> PipelineProcess:
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.status_path.unlink()
        args = [
            "run",
            str(self.pipeline_file),
            "--bootstrap-servers",
            self.bootstrap_servers,
            "--app",
            self.app,
            "--checkpoint-dir",
            str(self.checkpoint_dir),
            "--status-file",
            str(self.status_path),
            "--progress-interval",
            "1",
        ]
        for name, value in self.params.items():
            args += ["--param", f"{name}={value}"]
        if self.kafka_config is not None:
            args += ["--kafka-config", str(self.kafka_config)]
        args += list(self.extra_args)
        self.proc = spawn_sparkiq(args, self.log_path)
        return self

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, *, kill: bool = False, timeout_s: float = 60.0) -> None:
        """SIGTERM the runner (graceful), or SIGKILL its whole process group (a crash)."""
        proc = self.proc
        if proc is None:
            return
        if kill and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        stop_process(proc, kill=kill, grace_s=timeout_s, timeout_s=timeout_s)
        if not kill:
            # The JVM and Python workers it started exit with it; make sure of it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        self.proc = None

    def status(self) -> dict[str, Any] | None:
        """The last progress the runner wrote, or None before its first report."""
        try:
            data: dict[str, Any] = json.loads(self.status_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return data

    def running(self) -> bool:
        """True once the pipeline has started all its queries (each ran a first batch)."""
        status = self.status()
        return bool(status and status.get("running"))

    def processed(self) -> list[dict[str, dict[str, int]] | None]:
        """Per query, the source offsets its last completed micro-batch reached."""
        status = self.status()
        if status is None:
            return []
        return [q.get("end_offsets") for q in status.get("queries", [])]

    def caught_up(self, topics: Sequence[str]) -> bool:
        """True when every query has processed every record now in *topics*."""
        return self.processed_through(self.end_offsets(topics))

    def end_offsets(self, topics: Sequence[str]) -> dict[tuple[str, int], int]:
        """The true end of every partition of *topics* now (one probe of the broker)."""
        security = self.security
        tps = [
            (t, p)
            for t in topics
            for p in range(partition_count(self.bootstrap_servers, t, security=security))
        ]
        return true_end_offsets(self.bootstrap_servers, tps, security=security)

    def processed_through(self, ends: Mapping[tuple[str, int], int]) -> bool:
        """True when every query has processed its source partitions up to *ends*
        (`end_offsets`), read from the status file alone: a waiter that polls this asks
        the broker nothing."""
        processed = self.processed()
        if not processed:
            return False
        for offsets in processed:
            if offsets is None:
                return False
            for (topic, partition), end in ends.items():
                if end > 0 and offsets.get(topic, {}).get(str(partition), 0) < end:
                    return False
        return True
