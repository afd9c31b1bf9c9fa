"""Child processes that sparkiq starts (`python -m sparkiq ...`) and stops, by PID; and
SIGTERM taken as Ctrl-C by a command that started some (`sigterm_as_interrupt`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises its KeyboardInterrupt (`sigterm_as_interrupt`)."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within: SIGTERM raises `Terminated`, a KeyboardInterrupt, so the code that stops what
    was started on Ctrl-C (a `finally`, a context manager's exit) runs for it too; without
    this, SIGTERM ends the process at once and leaves its children (they run in sessions of
    their own) behind."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def spawn_sparkiq(
    args: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    prefix: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """Start `python -m sparkiq ARGS` in its own session, output appended to *log_path*.

    `prefix` goes before the interpreter: a command that execs its arguments in the same
    process (e.g. `ip netns exec NAME`), so the PID is still the node's.
    """
    log = open(log_path, "ab")  # noqa: SIM115 - the child owns it
    try:
        return subprocess.Popen(
            [*prefix, sys.executable, "-m", "sparkiq", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    finally:
        log.close()


def signal_process(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Send *sig* to *proc* by its PID, unless it has exited (then nothing)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)


def stop_process(
    proc: subprocess.Popen[bytes], *, kill: bool = False, grace_s: float, timeout_s: float
) -> None:
    """SIGTERM (or SIGKILL when `kill`), wait `grace_s`, then SIGKILL and wait for the exit."""
    if proc.poll() is not None:
        return
    signal_process(proc, signal.SIGKILL if kill else signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        signal_process(proc, signal.SIGKILL)
        proc.wait(timeout=timeout_s)
