"""Stops child processes that sparkiq started, by PID: a signal, a grace period, then SIGKILL."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def stop_process(
    proc: subprocess.Popen[bytes], *, kill: bool = False, grace_s: float, timeout_s: float
) -> None:
    """SIGTERM (or SIGKILL when `kill`), wait `grace_s`, then SIGKILL and wait for the exit."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout_s)
