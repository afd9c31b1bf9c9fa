"""Rights asked of a real secured Apache Kafka (SASL_SSL, ACLs enforced), and the refusals
that sparkiq's clients meet named: a topic it may not create or describe, a group it may
not join, a serving node that may not read its catalog or a changelog.

Every test uses topics and a group of its own (the session's secured broker is shared and
its grants add up); the user "nobody" is never granted anything.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkiq.core.errors import AccessDeniedError
from sparkiq.core.topology import MemberInfo
from sparkiq.dev.acls import Grant
from sparkiq.kafka.access import check_rights, missing_rights
from sparkiq.kafka.admin import create_topic, partition_count
from sparkiq.kafka.catalog import read_catalog
from sparkiq.kafka.rights import Need, Operation, Refusal, Resource
from sparkiq.kafka.roles import app_topics, serving_group
from sparkiq.node.group.membership import GroupMember
from sparkiq.node.node import Node
from sparkiq.node.settings import NodeSettings
from tests.support.secured import SecuredKafka

READ, WRITE = Operation.READ, Operation.WRITE
TOPIC = Resource.TOPIC


def test_missing_rights_are_the_ones_no_acl_grants(
    secured_kafka: SecuredKafka, unique_name: Callable[[str], str]
) -> None:
    readable, hidden, absent = unique_name("acc-r"), unique_name("acc-h"), unique_name("acc-a")
    for topic in (readable, hidden):
        secured_kafka.create_topic(topic, 1)
    secured_kafka.grant(
        "reader", [Grant(READ, TOPIC, readable), Grant(Operation.DESCRIBE, TOPIC, absent)]
    )
    needs = [
        Need(TOPIC, readable, READ),
        Need(TOPIC, readable, Operation.DESCRIBE),  # implied by READ
        Need(TOPIC, readable, WRITE),
        Need(TOPIC, hidden, READ),
        Need(TOPIC, absent, READ),  # does not exist: not a refusal, whoever needs it says so
    ]
    security = secured_kafka.security("reader")
    refused = missing_rights(secured_kafka.bootstrap, needs, security=security)
    assert refused == [
        Refusal(Need(TOPIC, readable, WRITE), "User:reader"),
        Refusal(Need(TOPIC, hidden, READ), "User:reader"),
    ]
    check_rights(secured_kafka.bootstrap, needs[:2], doing="read", security=security)
    with pytest.raises(AccessDeniedError, match=f"may not WRITE topic {readable} "):
        check_rights(secured_kafka.bootstrap, needs, doing="read", security=security)


def test_a_topic_it_may_not_create_is_named_with_the_right(
    secured_kafka: SecuredKafka, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("acc-create")
    with pytest.raises(AccessDeniedError) as info:
        create_topic(secured_kafka.bootstrap, topic, 1, security=secured_kafka.security("nobody"))
    assert f"principal User:nobody may not CREATE topic {topic} " in str(info.value)
    assert "TOPIC_AUTHORIZATION_FAILED" in str(info.value)


def test_a_topic_it_may_not_describe_is_not_called_missing(
    secured_kafka: SecuredKafka, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("acc-describe")
    secured_kafka.create_topic(topic, 2)
    with pytest.raises(AccessDeniedError) as info:
        partition_count(secured_kafka.bootstrap, topic, security=secured_kafka.security("nobody"))
    assert f"may not DESCRIBE topic {topic} (TOPIC_AUTHORIZATION_FAILED)" in str(info.value)
    assert "does not exist" not in str(info.value)


def test_a_group_it_may_not_join_is_named_at_once(
    secured_kafka: SecuredKafka, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("acc-grp-topic"), unique_name("acc-grp")
    secured_kafka.create_topic(topic, 1)
    secured_kafka.grant("reader", [Grant(READ, TOPIC, topic)])
    member = GroupMember(
        bootstrap=secured_kafka.bootstrap,
        group_id=group,
        member_info=lambda: MemberInfo(url="http://127.0.0.1:1"),
        on_assignment=lambda _map: None,
        standby_replicas=0,
        acceptable_lag=0,
        session_timeout_ms=6_000,
        heartbeat_interval_ms=1_000,
        security=secured_kafka.security("reader"),
    )
    started = time.monotonic()
    with pytest.raises(AccessDeniedError) as info:
        asyncio.run(member.start([topic]))
    assert time.monotonic() - started < 10
    assert (
        f"cannot join group {group!r}: principal User:reader may not READ group {group} "
        "(GROUP_AUTHORIZATION_FAILED)"
    ) in str(info.value)


def _node(secured_kafka: SecuredKafka, user: str, app: str, state_dir: Path) -> Node:
    return Node(
        NodeSettings(
            bootstrap_servers=secured_kafka.bootstrap,
            app=app,
            state_dir=state_dir,
            kafka_config=secured_kafka.security(user),
        )
    )


def test_a_node_that_may_not_read_its_catalog_fails_at_start(
    secured_kafka: SecuredKafka, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    app = unique_name("acc-app")
    for topic in app_topics(app):
        secured_kafka.create_topic(topic, 1)
    catalog, progress, queries = app_topics(app)
    secured_kafka.grant("reader", [Grant(READ, TOPIC, progress), Grant(READ, TOPIC, queries)])
    node = _node(secured_kafka, "reader", app, tmp_path)

    async def start() -> None:
        try:
            await node.start()
        finally:
            await node.stop()

    started = time.monotonic()
    with pytest.raises(AccessDeniedError) as info:
        asyncio.run(start())
    assert time.monotonic() - started < 10
    message = str(info.value)
    assert message.startswith(f"cannot start the serving node of app {app!r}: ")
    assert f"principal User:reader may not READ topic {catalog} " in message
    assert progress not in message  # what it may read is not named


def test_what_the_node_reads_with_its_rights(
    secured_kafka: SecuredKafka, unique_name: Callable[[str], str]
) -> None:
    """With READ on the catalog alone, the catalog reader (a librdkafka consumer that only
    assigns) reads it: no right on the consumer group librdkafka makes it name is needed."""
    app = unique_name("acc-cat")
    for topic in app_topics(app):
        secured_kafka.create_topic(topic, 1)
    catalog = app_topics(app)[0]
    secured_kafka.grant("reader", [Grant(READ, TOPIC, catalog)])
    assert (
        read_catalog(secured_kafka.bootstrap, app=app, security=secured_kafka.security("reader"))
        == {}
    )
    assert serving_group(app) == f"{app}.serving"
