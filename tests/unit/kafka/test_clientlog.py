"""librdkafka's lines go to the logger `sparkiq.librdkafka` at DEBUG, never to the terminal."""

from __future__ import annotations

import logging
import pickle

import pytest
from confluent_kafka import Producer

from sparkiq.dev.ports import free_port
from sparkiq.kafka.clientlog import LOG_CONF, LibrdkafkaLog


def test_a_client_that_cannot_connect_writes_nothing_to_stderr_and_logs_at_debug(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="sparkiq.librdkafka")
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{free_port()}", **LOG_CONF})
    producer.produce("t", b"v")
    producer.flush(1.5)  # serves the queued log lines; librdkafka retries meanwhile
    del producer
    assert "rdkafka" not in capfd.readouterr().err
    lines = [r for r in caplog.records if r.name == "sparkiq.librdkafka"]
    assert lines, "librdkafka's connection failures reach the logger"
    assert {r.levelno for r in lines} == {logging.DEBUG}
    assert any("Connection refused" in r.getMessage() for r in lines)


def test_without_the_logger_librdkafka_writes_to_stderr(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """What the above prevents (so the first test can tell the difference)."""
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{free_port()}"})
    producer.produce("t", b"v")
    producer.flush(1.5)
    del producer
    assert "Connection refused" in capfd.readouterr().err


def test_the_logger_travels_to_spark_workers() -> None:
    assert isinstance(pickle.loads(pickle.dumps(LOG_CONF))["logger"], LibrdkafkaLog)
