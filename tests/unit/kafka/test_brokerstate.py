"""What a librdkafka client says of its brokers (kafka/brokerstate.py): every broker down
through its error callback, one answering through its statistics."""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer
from confluent_kafka import KafkaError as CKafkaError

from sparkiq.dev.ports import free_port
from sparkiq.kafka.brokerstate import any_broker_up, watch_conf
from sparkiq.kafka.clientlog import LOG_CONF


class Heard:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def lost(self, reason: str) -> None:
        self.events.append(("lost", reason))

    def reached(self) -> None:
        self.events.append(("reached", ""))


def stats(*brokers: tuple[str, str]) -> str:
    """librdkafka's statistics with brokers of (source, state)."""
    return json.dumps(
        {
            "name": "rdkafka#consumer-1",
            "brokers": {
                f"b{i}": {"name": f"b{i}", "source": source, "state": state, "nodeid": i}
                for i, (source, state) in enumerate(brokers)
            },
        }
    )


def test_a_real_broker_in_state_up_is_contact() -> None:
    assert any_broker_up(stats(("configured", "CONNECT"), ("learned", "UP"))) is True
    assert any_broker_up(stats(("configured", "UP"))) is True
    assert any_broker_up(stats(("learned", "DOWN"), ("configured", "TRY_CONNECT"))) is False


def test_librdkafkas_own_placeholders_are_not_brokers() -> None:
    assert any_broker_up(stats(("internal", "UP"), ("learned", "CONNECT"))) is False
    assert any_broker_up(stats(("internal", "UP"), ("logical", "UP"))) is None
    assert any_broker_up(json.dumps({"name": "x"})) is None


def test_the_callbacks_report_all_down_with_the_last_transport_error_and_up() -> None:
    heard = Heard()
    conf = watch_conf(heard)
    assert conf["statistics.interval.ms"] == 1000
    conf["error_cb"](CKafkaError(CKafkaError._TRANSPORT, "b1: Connection refused"))
    assert heard.events == []  # one broker failing is not an outage
    conf["error_cb"](CKafkaError(CKafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert heard.events == [("lost", "every broker is down; last: b1: Connection refused")]
    conf["stats_cb"]("not json")  # ignored
    conf["stats_cb"](stats(("learned", "CONNECT")))
    assert len(heard.events) == 1
    conf["stats_cb"](stats(("learned", "UP")))
    assert heard.events[-1] == ("reached", "")


def test_a_real_client_reports_its_broker_up(bootstrap: str) -> None:
    heard = Heard()
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "g", **LOG_CONF, **watch_conf(heard)}
    )
    try:
        consumer.list_topics(timeout=10)
        deadline = time.monotonic() + 10
        while ("reached", "") not in heard.events and time.monotonic() < deadline:
            consumer.poll(0.2)
    finally:
        consumer.close()
    assert ("reached", "") in heard.events
    assert not [e for e in heard.events if e[0] == "lost"]


def test_a_real_client_without_a_broker_reports_it_lost() -> None:
    heard = Heard()
    nowhere = f"127.0.0.1:{free_port()}"
    consumer = Consumer(
        {"bootstrap.servers": nowhere, "group.id": "g", **LOG_CONF, **watch_conf(heard)}
    )
    try:
        deadline = time.monotonic() + 10
        while not heard.events and time.monotonic() < deadline:
            consumer.poll(0.2)
    finally:
        consumer.close()
    assert heard.events
    assert heard.events[0][0] == "lost"
    assert heard.events[0][1].startswith("every broker is down")
    assert ("reached", "") not in heard.events
