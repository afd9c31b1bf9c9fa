"""The node's contact with its brokers (node/brokercontact.py): one state, changed by what
its Kafka clients report, logged once per change, described for /readyz and /v1/metadata."""

from __future__ import annotations

import logging

import pytest

from sparkiq.node.brokercontact import BrokerContact, ContactState, iso_time


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def contact(now: float = 1_800_000_000.0) -> tuple[BrokerContact, Clock]:
    clock = Clock(now)
    return BrokerContact("k1:9092,k2:9092", clock=clock), clock


def test_reachable_until_a_client_says_every_broker_is_down() -> None:
    brokers, _ = contact()
    assert brokers.is_reachable
    assert brokers.fields() == {"reachable": True}
    assert brokers.describe() is None


def test_unreachable_since_the_first_report_with_its_reason_and_age() -> None:
    brokers, clock = contact(1_800_000_000.25)
    brokers.lost("1/1 brokers are down")
    clock.now += 12.34
    brokers.lost("1/1 brokers are down again")  # a later report moves nothing
    assert not brokers.is_reachable
    assert brokers.fields() == {
        "reachable": False,
        "unreachable_since": "2027-01-15T08:00:00.250Z",
        "unreachable_s": 12.3,
        "reason": "1/1 brokers are down",
    }
    said = brokers.describe()
    assert said is not None
    assert "k1:9092,k2:9092 are unreachable since 2027-01-15T08:00:00.250Z (12 s)" in said


def test_reachable_again_once_a_broker_answers() -> None:
    brokers, clock = contact()
    brokers.lost("down")
    clock.now += 60
    brokers.reached()
    assert brokers.state == ContactState()
    assert brokers.fields() == {"reachable": True}
    brokers.lost("down once more")
    assert brokers.state.since == clock.now  # a new outage, a new moment


def test_each_change_is_logged_once_not_each_report(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="sparkiq.node.brokercontact")
    brokers, clock = contact()
    brokers.reached()  # nothing changes
    for _ in range(5):
        brokers.lost("Connection refused")
        clock.now += 10
    for _ in range(5):
        brokers.reached()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("cannot reach the Kafka brokers at k1:9092,k2:9092")
    assert "Connection refused" in lines[0]
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO]
    assert "answer again after 50 s unreachable" in lines[1]


def test_a_clock_a_little_behind_the_outage_start_says_zero_seconds() -> None:
    state = ContactState(reachable=False, since=100.0, reason=None)
    assert state.fields(now=99.5) == {
        "reachable": False,
        "unreachable_since": iso_time(100.0),
        "unreachable_s": 0.0,
    }


def test_iso_time_is_utc_to_the_millisecond() -> None:
    assert iso_time(0) == "1970-01-01T00:00:00.000Z"
    assert iso_time(1.5) == "1970-01-01T00:00:01.500Z"
