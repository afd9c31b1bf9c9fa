"""The dev broker: started on a free loopback port, answering, stopped by PID, no litter."""

from __future__ import annotations

import os
from pathlib import Path

from confluent_kafka.admin import AdminClient

from sparkiq.dev.devbroker import DevBroker


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
