"""A Spark standalone cluster on loopback: one master and one worker, from pyspark's own jars.

Both run `bin/spark-class` of the installed pyspark (which execs the JVM, so the PID is the
JVM's) on 127.0.0.1 with free ports, and are stopped by PID. The worker's executors start
Python workers with the driver's interpreter (PYSPARK_PYTHON) and inherit this process's
environment, PYTHONPATH included, so they import the sparkiq under test.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from sparkiq.dev.ports import free_port

_REGISTERED = re.compile(r"Registering worker 127\.0\.0\.1:\d+ with (\d+) cores")


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 - the child owns it
    try:
        return subprocess.Popen(
            [str(_spark_home() / "bin" / "spark-class"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    finally:
        out.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)


@contextlib.contextmanager
def standalone_cluster(base: Path, *, cores: int = 2, memory: str = "2g") -> Iterator[str]:
    """A master and a worker with *cores* cores; yields the master URL ``spark://...``."""
    base.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SPARK_HOME": str(_spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",  # every RPC endpoint and web UI on loopback
        "SPARK_LOG_DIR": str(base),
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        # No REST submission server: it takes the fixed port 6066.
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    }
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master_log = base / "master.log"
    master = _start(
        [
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(free_port()),
        ],
        master_log,
        env,
    )
    worker: subprocess.Popen[bytes] | None = None
    try:
        worker = _start(
            [
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--port",
                str(free_port()),
                "--webui-port",
                str(free_port()),
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--work-dir",
                str(base / "work"),
                url,
            ],
            base / "worker.log",
            env,
        )
        deadline = time.monotonic() + 120
        while not _REGISTERED.search(master_log.read_text(errors="replace")):
            if master.poll() is not None or worker.poll() is not None:
                raise RuntimeError(
                    f"the Spark master or worker exited: {master_log.read_text()[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"no worker registered: {master_log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        if worker is not None:
            _stop(worker)
        _stop(master)
