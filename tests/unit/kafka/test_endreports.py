"""Telling a cluster whose ListOffsets gives true ends (Apache Kafka) from the dev broker."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Producer

from sparkiq.kafka import endreports
from sparkiq.kafka.admin import create_topic


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    endreports.forget()
    yield
    endreports.forget()


def _topic(bootstrap: str, name: str, records: int) -> list[tuple[str, int]]:
    create_topic(bootstrap, name, 2)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(records):
        producer.produce(name, key=f"k{i}".encode(), value=b"v", partition=0)
    assert producer.flush(10) == 0
    return [(name, 0), (name, 1)]


def _classified(bootstrap: str, tps: list[tuple[str, int]]) -> bool:
    """`lists_true_ends`, asked until it has an answer: a topic just made may still be
    electing its leaders, and "cannot tell" is False, asked again next time (not kept)."""
    deadline = time.monotonic() + 30.0
    while not endreports.lists_true_ends(bootstrap, tps) and time.monotonic() < deadline:
        time.sleep(0.5)
    return endreports.lists_true_ends(bootstrap, tps)


def test_apache_kafka_lists_true_ends(bootstrap: str, unique_name: Callable[[str], str]) -> None:
    assert _classified(bootstrap, _topic(bootstrap, unique_name("er"), 5))


def test_an_empty_partition_is_enough_to_tell(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    assert _classified(bootstrap, _topic(bootstrap, unique_name("er"), 0)[1:])


def test_the_dev_broker_does_not(dev_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    assert not endreports.lists_true_ends(
        dev_bootstrap, _topic(dev_bootstrap, unique_name("er"), 5)
    )


def test_the_answer_is_remembered_per_cluster(
    bootstrap: str, dev_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    tps = _topic(bootstrap, unique_name("er"), 1)
    assert _classified(bootstrap, tps)
    # Remembered: no partition is needed to answer again.
    assert endreports.lists_true_ends(bootstrap, [])
    assert not endreports.lists_true_ends(
        dev_bootstrap, _topic(dev_bootstrap, unique_name("er"), 1)
    )
    assert not endreports.lists_true_ends(dev_bootstrap, [])


def test_no_answer_is_the_safe_side_and_asked_again() -> None:
    # Nothing listens on port 1: the cluster cannot be classified now.
    assert not endreports.lists_true_ends("127.0.0.1:1", [("t", 0)], timeout_s=0.5)
    assert "127.0.0.1:1" not in endreports._known
    # Without a partition to ask through, it cannot be classified either.
    assert not endreports.lists_true_ends("127.0.0.1:2", [])
