"""`check_reachable`: a TCP look at the bootstrap servers before a Kafka client retries for
its whole timeout."""

from __future__ import annotations

import re
import socket
import time

import pytest

from sparkiq.core.errors import KafkaError
from sparkiq.dev.ports import free_port
from sparkiq.kafka.reach import BrokersUnreachable, bootstrap_addresses, check_reachable


def test_bootstrap_lists_are_read_as_librdkafka_reads_them() -> None:
    assert bootstrap_addresses("a:1, b:2") == [("a", 1), ("b", 2)]
    assert bootstrap_addresses("SASL_SSL://h:9093") == [("h", 9093)]
    assert bootstrap_addresses("[::1]:9093,[::1]") == [("::1", 9093), ("::1", 9092)]
    assert bootstrap_addresses("kafka") == [("kafka", 9092)]


@pytest.mark.parametrize("text", ["h:x", "h:0", "h:70000", ":9092", " , "])
def test_an_unusable_bootstrap_entry_says_what_to_write(text: str) -> None:
    with pytest.raises(KafkaError, match=re.escape("--bootstrap-servers 127.0.0.1:9092")):
        bootstrap_addresses(text)


def test_one_listening_address_is_enough() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        check_reachable(f"127.0.0.1:{free_port()},127.0.0.1:{port}")


def test_nothing_listening_is_said_at_once_naming_each_address() -> None:
    first = free_port()
    started = time.monotonic()
    with pytest.raises(BrokersUnreachable) as caught:
        check_reachable(f"127.0.0.1:{first},no-such-host.invalid:9092")
    assert time.monotonic() - started < 5.0
    assert str(caught.value) == (
        f"cannot reach a Kafka broker at 127.0.0.1:{first},no-such-host.invalid:9092 "
        f"(127.0.0.1:{first}: connection refused; no-such-host.invalid:9092: no such host); "
        "check --bootstrap-servers (or SPARKIQ_BOOTSTRAP_SERVERS) and that the brokers run "
        "and listen there"
    )
