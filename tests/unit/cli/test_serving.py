"""`sparkiq serve` refuses bad listen addresses at start, before anything joins the group."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest


def serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # Something listens at the bootstrap address (the node looks before it starts), but it
    # is never asked anything: the listen address fails first.
    with socket.socket() as broker:
        broker.bind(("127.0.0.1", 0))
        broker.listen()
        bootstrap = f"127.0.0.1:{broker.getsockname()[1]}"
        command = [sys.executable, "-m", "sparkiq", "serve", "--auth", "none"]
        command += ["--state-dir", str(tmp_path / "state"), "--bootstrap-servers", bootstrap]
        return subprocess.run(
            [*command, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )


def test_a_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = serve(tmp_path, "--listen", f"127.0.0.1:{port}")
    assert done.returncode == 2, done.stderr
    assert f"cannot serve HTTP on http://127.0.0.1:{port}" in done.stderr
    assert "address already in use" in done.stderr
    assert "joined group" not in done.stderr


@pytest.mark.parametrize(
    ("listen", "says"),
    [
        ("no-such-host.invalid:8100", "cannot serve HTTP on http://no-such-host.invalid:8100"),
        ("8100", "host:port"),
    ],
)
def test_a_listen_address_that_cannot_be_used_is_refused(
    tmp_path: Path, listen: str, says: str
) -> None:
    done = serve(tmp_path, "--listen", listen)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
