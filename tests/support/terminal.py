"""A shell a test types blocks of commands into, as a reader types them into a terminal.

One `bash` per terminal, in a session of its own: what a block exports, activates or starts
with `&` is there for the next block, as in a terminal. Each block is a file the shell
`source`s with `set -e` (a failing command stops the terminal, and the test says where),
its stdin from /dev/null (a heredoc gives its own). Everything the shell and its jobs print
is read line by line into `lines`. Jobs are stopped by their PIDs (`jobs -p`); Ctrl-C is
SIGINT to the terminal's process group, which is what a terminal sends.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path


class TerminalError(AssertionError):
    """A block failed, took too long, or the shell stopped; the message holds what it printed."""


class Terminal:
    """A bash that blocks are typed into, and everything it printed."""

    def __init__(self, name: str, cwd: Path, env: Mapping[str, str]) -> None:
        self.name = name
        self._cwd = cwd
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._ended = False
        self._typed = 0  # commands typed, each marked when done
        self._mark = ""
        self._first = 0
        self._proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(env),
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._read, name=f"terminal-{name}", daemon=True).start()
        self._write("set -e\n")

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def _write(self, text: str) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(text)
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise TerminalError(self._said(f"the {self.name} terminal has stopped")) from None

    def start(self, script: Path, *, python: bool = False) -> int:
        """Type `script` (a Python program when `python`) without waiting for it; the index in
        `lines` of the first line it prints."""
        return self._type(f"{'python' if python else 'source'} {shlex.quote(str(script))}")[0]

    def run(self, script: Path, *, python: bool = False, timeout_s: float, what: str = "") -> str:
        """Type `script` and wait until it is done; what it printed (`what`: the script, as
        a failure names it)."""
        self.start(script, python=python)
        return self._until_done(timeout_s, what or str(script))

    def wait_for(
        self,
        done: Callable[[list[str]], bool],
        first: int,
        timeout_s: float,
        what: str = "output",
    ) -> list[str]:
        """Wait until `done(lines printed since first)` holds; those lines."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not done(self.lines[first:]):
                left = deadline - time.monotonic()
                # The shell's end, not its output's: jobs it started may hold that open.
                status = self._proc.poll()
                if status is not None or self._ended:
                    why = f"the {self.name} terminal stopped (status {status}) at {what}"
                    raise TerminalError(self._said(why))
                if left <= 0:
                    raise TerminalError(self._said(f"{what} took more than {timeout_s:g} s"))
                self._changed.wait(min(left, 0.5))
            return self.lines[first:]

    def jobs(self) -> list[int]:
        """The PIDs of the jobs started with `&` that are still running."""
        path = self._cwd / f".jobs-{self.name}"
        self._type(f"jobs -p > {shlex.quote(str(path))}")
        self._until_done(10, "jobs -p")
        return [int(pid) for pid in path.read_text().split()]

    def _type(self, command: str) -> tuple[int, str]:
        """Type `command` (stdin from /dev/null), then a line that prints a mark once it is
        done; the index of the first line it prints, and the mark."""
        self._typed += 1
        self._mark = f"__typed_{self._typed}_done_in_{self.name}__"
        with self._changed:
            first = self._first = len(self.lines)
        self._write(f"{command} < /dev/null\nprintf '\\n{self._mark}\\n'\n")
        return first, self._mark

    def _until_done(self, timeout_s: float, what: str) -> str:
        """Wait until what was typed last is done; what it printed."""
        mark = self._mark
        lines = self.wait_for(
            lambda ls: any(mark in line for line in ls), self._first, timeout_s, what
        )
        return "".join(line for line in lines if mark not in line)

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the terminal's foreground process group (the whole session)."""
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGINT)

    def close(self, timeout_s: float = 10.0) -> None:
        """End the shell (its stdin closed); then SIGTERM, and after `timeout_s` SIGKILL,
        what it started that still runs in its process group (the jobs of a shell that
        stopped mid-block: nothing else is in that group)."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self._proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=2)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self._proc.pid, sig)
            except ProcessLookupError:
                break  # the group is empty
            deadline = time.monotonic() + timeout_s
            while _group_runs(self._proc.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
        self._proc.wait(timeout=timeout_s)

    def transcript(self, last: int = 60) -> str:
        with self._changed:
            return "".join(self.lines[-last:])

    def _said(self, why: str) -> str:
        return f"{why}; the {self.name} terminal's last lines:\n{self.transcript()}"


def stop_jobs(pids: list[int], *, grace_s: float = 15.0) -> None:
    """SIGTERM each PID, wait for all to exit (`grace_s`), then SIGKILL those left."""
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if _running(pid):
            _signal(pid, signal.SIGKILL)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _running(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not: it has exited and waits for its parent)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _group_runs(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (zombies do not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False
