"""The dev broker: started on a free loopback port, answering, stopped by PID, no litter."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from sparkiq.dev.broker import DevBroker, _ephemeral_low, free_port


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); its state in /proc says it is gone.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_a_started_broker_answers_and_a_clean_stop_removes_its_own_log() -> None:
    broker = DevBroker().start()
    try:
        pid = broker.pid
        log = broker.log_path
        assert pid is not None
        assert log is not None
        assert log.exists()
        assert broker.bootstrap_servers.startswith("127.0.0.1:")
        metadata = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(
            timeout=5
        )
        assert metadata.brokers, "the broker answered a metadata request with no brokers"
    finally:
        broker.stop()
    assert not _alive(pid)
    assert not log.exists()
    assert broker.log_path is None


def test_a_log_path_the_caller_chose_is_kept(tmp_path: Path) -> None:
    log = tmp_path / "broker.log"
    with DevBroker(log_path=log) as broker:
        assert broker.pid is not None
    assert log.exists()
    assert broker.log_path == log


def test_free_ports_are_bindable_and_below_the_ephemeral_range() -> None:
    low = _ephemeral_low()
    if low <= 21_000:
        pytest.skip(f"the ephemeral range starts at {low}: no room below it to pick from")
    ports = {free_port() for _ in range(20)}
    assert all(20_000 <= port < low for port in ports)
    assert len(ports) > 1  # chosen at random, not one fixed port
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))  # still free: nothing listens there
