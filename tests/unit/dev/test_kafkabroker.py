"""Apache Kafka started by sparkiq: KRaft on loopback, one node or three (replication 3,
min.insync.replicas 2 for the topics sparkiq creates), stopped by PID, data kept when asked;
secured: SCRAM-SHA-512 over TLS, ACLs enforced."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource

from sparkiq.core.errors import AccessDeniedError, BrokerError, KafkaError
from sparkiq.dev.kafkabroker import KafkaBroker, _new_cluster_id
from sparkiq.kafka.admin import create_topic, partition_count, topic_config
from sparkiq.kafka.security import KafkaSecurity
from tests.support.secured import SecuredKafka


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def _produce(bootstrap: str, topic: str, n: int, **conf: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **conf})
    failed: list[str] = []
    for i in range(n):
        producer.produce(
            topic,
            key=f"k{i}".encode(),
            value=b"v",
            on_delivery=lambda err, _msg: failed.append(str(err)) if err else None,
        )
    assert producer.flush(30) == 0
    assert failed == []


def _count(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "count"})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        )
    finally:
        consumer.close()


def test_the_session_broker_is_one_kraft_node(broker: KafkaBroker) -> None:
    assert broker.node_ids == [1]
    assert broker.bootstrap_servers.startswith("127.0.0.1:")
    assert "Apache Kafka 4.4.0 (KRaft, 1 node)" in broker.describe()
    assert broker.data_dir is not None
    assert str(broker.data_dir) in broker.describe()


def test_a_topic_sparkiq_creates_takes_the_brokers_defaults(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("defaults")
    create_topic(bootstrap, topic, 2)
    assert topic_config(bootstrap, topic)["min.insync.replicas"] == "1"


def test_three_nodes_replicate_and_survive_one_killed(tmp_path: Path) -> None:
    with KafkaBroker(nodes=3) as cluster:
        bootstrap = cluster.bootstrap_servers
        assert len(bootstrap.split(",")) == 3
        assert len(set(cluster.pids)) == 3
        create_topic(bootstrap, "replicated", 3)
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics("replicated", timeout=10)
        assert all(len(p.replicas) == 3 for p in md.topics["replicated"].partitions.values())
        assert topic_config(bootstrap, "replicated")["min.insync.replicas"] == "2"
        _produce(bootstrap, "replicated", 300, acks="all")

        pid = cluster.pids[0]
        cluster.kill_node(1)
        assert not _alive(pid)
        # Two in-sync replicas are left: writes with acks=all still succeed.
        _produce(bootstrap, "replicated", 300, acks="all", **{"message.timeout.ms": "60000"})
        cluster.start_node(1)
        assert len(cluster.pids) == 3
        assert _count(bootstrap, "replicated", 3) == 600
        pids = cluster.pids
        data_dir = cluster.data_dir
        assert data_dir is not None
    assert not any(_alive(p) for p in pids)
    assert not data_dir.exists()  # its own temporary directory, removed


def test_a_data_dir_given_keeps_the_data_and_the_ports(tmp_path: Path) -> None:
    data = tmp_path / "kafka"
    with KafkaBroker(data_dir=data) as first:
        bootstrap = first.bootstrap_servers
        create_topic(bootstrap, "kept", 2)
        _produce(bootstrap, "kept", 50)
    assert (data / "cluster.json").is_file()
    with KafkaBroker(data_dir=data) as second:
        assert second.bootstrap_servers == bootstrap
        assert _count(bootstrap, "kept", 2) == 50
    with pytest.raises(BrokerError, match="holds a cluster of 1 nodes, not 3"):
        KafkaBroker(nodes=3, data_dir=data).start()


def test_a_cluster_has_one_or_three_nodes() -> None:
    with pytest.raises(BrokerError, match="1 or 3 nodes"):
        KafkaBroker(nodes=2)


def test_a_node_that_cannot_start_is_reported_with_its_log(tmp_path: Path) -> None:
    bad = KafkaBroker(settings={"num.io.threads": "not-a-number"}, startup_timeout_s=60)
    try:
        with pytest.raises(
            BrokerError, match=r"ConfigException: Invalid value not-a-number .*num.io.threads"
        ):
            bad.start()
        assert bad.pids == []
        # The directory stays for the log the message names, until the object is stopped.
        assert bad.data_dir is not None
        assert bad.data_dir.exists()
    finally:
        bad.stop()
    assert bad.data_dir is None


def test_settings_reach_the_broker(tmp_path: Path) -> None:
    with KafkaBroker(settings={"log.retention.check.interval.ms": "12345"}) as k:
        admin = AdminClient({"bootstrap.servers": k.bootstrap_servers})
        futures = admin.describe_configs([ConfigResource("broker", "1")])
        entries = next(iter(futures.values())).result(10)
        assert entries["log.retention.check.interval.ms"].value == "12345"
        assert entries["group.min.session.timeout.ms"].value == "1000"


def test_cluster_ids_are_kafkas_shape_and_never_look_like_an_option() -> None:
    ids = [_new_cluster_id() for _ in range(2_000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tls_cert_file": Path("c.pem")}, "needs both tls_cert_file and tls_key_file"),
        (
            {"tls_cert_file": Path("c.pem"), "tls_key_file": Path("k.pem")},
            "the TLS listener is the SASL one",
        ),
        ({"scram_users": {"a": "p"}, "super_users": ["b"]}, r"super users \['b'\] are not"),
    ],
)
def test_security_options_that_do_not_fit_together(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(BrokerError, match=match):
        KafkaBroker(**kwargs)


def test_the_secured_broker_takes_scram_over_tls_and_enforces_acls(
    secured_kafka: SecuredKafka, unique_name: Callable[[str], str]
) -> None:
    broker = secured_kafka.broker
    assert broker.sasl_protocol == "SASL_SSL"
    settings = (broker.data_dir or Path()) / "node-1" / "server.properties"
    text = settings.read_text()
    assert "allow.everyone.if.no.acl.found=false" in text
    assert "super.users=User:ANONYMOUS;User:admin\n" in text
    topic = unique_name("broker-acl")
    secured_kafka.create_topic(topic, 1)  # the admin, a super user, may
    # A user without any ACL may not even see the topic...
    with pytest.raises(AccessDeniedError, match=f"may not DESCRIBE topic {topic}"):
        partition_count(secured_kafka.bootstrap, topic, security=secured_kafka.security("nobody"))
    # ...and the listener speaks TLS only: a SASL login in the clear is not answered.
    clear = KafkaSecurity.from_pairs(
        [p.replace("SASL_SSL", "SASL_PLAINTEXT") for p in secured_kafka.pairs("admin")[:4]]
    )
    with pytest.raises(KafkaError):
        partition_count(secured_kafka.bootstrap, topic, timeout_s=3, security=clear)
