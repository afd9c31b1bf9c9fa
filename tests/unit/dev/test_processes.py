from __future__ import annotations

import subprocess
import sys
import time

from sparkiq.dev.processes import stop_process


def _sleeper(ignore_term: bool) -> subprocess.Popen[bytes]:
    code = "import signal, time\n"
    if ignore_term:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "print('up', flush=True)\ntime.sleep(60)\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"up\n"
    return proc


def test_sigterm_stops_a_cooperative_process() -> None:
    proc = _sleeper(ignore_term=False)
    stop_process(proc, grace_s=5, timeout_s=5)
    assert proc.returncode == -15


def test_a_process_ignoring_sigterm_is_killed_after_the_grace() -> None:
    proc = _sleeper(ignore_term=True)
    started = time.monotonic()
    stop_process(proc, grace_s=0.5, timeout_s=5)
    assert proc.returncode == -9
    assert time.monotonic() - started < 4


def test_kill_sends_sigkill_at_once() -> None:
    proc = _sleeper(ignore_term=True)
    stop_process(proc, kill=True, grace_s=5, timeout_s=5)
    assert proc.returncode == -9
