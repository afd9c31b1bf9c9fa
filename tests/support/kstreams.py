"""A real Kafka Streams application for the tests: compiled from `kstreamsapp/IqApp.java`
with javac against Kafka Streams' jars (`sparkiq install kafka-streams`), run as a Java
process, asked for its own interactive-query answers over stdin."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson

from sparkiq.core.jarsets import KAFKA_STREAMS, installed_jars

SOURCE = Path(__file__).parent / "kstreamsapp" / "IqApp.java"


def kafka_streams_jars() -> list[Path] | None:
    """Kafka Streams' jars, if installed, and javac to compile against them."""
    jars = installed_jars(KAFKA_STREAMS)
    return jars if jars is not None and shutil.which("javac") else None


def compile_app(jars: list[Path], out: Path) -> Path:
    """The directory of IqApp's compiled classes (about 3 s of javac)."""
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["javac", "-d", str(out), "-cp", ":".join(map(str, jars)), str(SOURCE)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


class IqApp:
    """One running instance of the application (all partitions: its IQ sees every key)."""

    def __init__(
        self,
        classes: Path,
        jars: list[Path],
        *,
        bootstrap: str,
        application_id: str,
        state_dir: Path,
        profiles_topic: str,
        clicks_topic: str,
        log: Path,
    ) -> None:
        self._log = log.open("wb")
        cp = ":".join([str(classes), *map(str, jars)])
        self.proc = subprocess.Popen(
            [
                "java", "-Xmx256m", "-cp", cp, "IqApp", bootstrap, application_id,
                str(state_dir), profiles_topic, clicks_topic,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )  # fmt: skip
        self._expect("running", timeout_s=90)

    def _expect(self, prefix: str, timeout_s: float) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline().decode().strip()
            if line.startswith(prefix):
                return line
            if not line and self.proc.poll() is not None:
                break
        raise AssertionError(f"the Kafka Streams app never said {prefix!r}; see {self._log.name}")

    def _send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()

    def dump(self, path: Path) -> dict[str, Any]:
        """What the application's own interactive queries return, store by store."""
        self._send(f"dump {path}")
        self._expect("dumped", timeout_s=60)
        out: dict[str, Any] = orjson.loads(path.read_bytes())
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self._send("stop")
                self.proc.wait(timeout=45)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
