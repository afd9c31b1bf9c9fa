"""The message that names a refused right, and who the principal is (pure)."""

from __future__ import annotations

import pytest

from sparkiq.kafka.rights import (
    Need,
    Operation,
    Refusal,
    Resource,
    principal_of,
    refusal_message,
)
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity

READER = KafkaSecurity.from_pairs(
    [
        "security.protocol=SASL_SSL",
        "sasl.mechanism=SCRAM-SHA-512",
        "sasl.username=reader",
        "sasl.password=reader-secret",
    ]
)
REWARDS = Need(Resource.TOPIC, "pos.rewards-changelog", Operation.READ, "restore table 'rewards'")


def test_the_principal_is_the_sasl_user() -> None:
    assert principal_of(READER) == "User:reader"
    # Without a SASL user the brokers decide (a certificate's name, ANONYMOUS): say how.
    assert principal_of(PLAINTEXT) == "(the principal of security.protocol=PLAINTEXT)"


def test_one_refusal_names_principal_right_resource_code_and_the_grant() -> None:
    message = refusal_message([Refusal(REWARDS, "User:reader")], "b:9093", "start the node")
    assert message == (
        "cannot start the node: principal User:reader may not READ topic "
        "pos.rewards-changelog (TOPIC_AUTHORIZATION_FAILED) (needed to restore table "
        "'rewards'). Ask a Kafka admin to grant it: kafka-acls.sh --bootstrap-server b:9093 "
        "--command-config admin.properties --add --allow-principal User:reader --operation "
        "Read --topic pos.rewards-changelog"
    )
    assert "reader-secret" not in message


def test_several_refusals_make_one_message() -> None:
    group = Need(Resource.GROUP, "pos.serving", Operation.READ)
    message = refusal_message(
        [Refusal(REWARDS, "User:reader"), Refusal(group, "User:reader")], "b:1", "join"
    )
    assert message.count("may not READ") == 2
    assert "group pos.serving (GROUP_AUTHORIZATION_FAILED)" in message
    assert "--group pos.serving" in message
    assert "grant them:" in message


def test_a_principal_not_known_gets_a_placeholder_in_the_grant() -> None:
    refusal = Refusal(REWARDS, principal_of(PLAINTEXT))
    assert "--allow-principal User:<name>" in refusal.grant("b:1")


def test_no_refusal_is_no_message() -> None:
    with pytest.raises(ValueError, match="no refusal"):
        refusal_message([], "b:1", "start")
