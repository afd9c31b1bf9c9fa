"""What a three-broker Apache Kafka cluster says about itself, for the broker-failure tests:
who leads which partitions, who coordinates a consumer group, whether every replica is in
sync, and the topics' replication settings."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource

from sparkiq.kafka.clientlog import LOG_CONF


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **LOG_CONF})


@dataclass(frozen=True)
class GroupView:
    """A consumer group as its coordinator describes it."""

    coordinator: int
    state: str
    members: int

    def is_stable_with(self, members: int) -> bool:
        return self.state == ConsumerGroupState.STABLE.name and self.members == members


def describe_group(client: AdminClient, group: str, timeout_s: float = 2.0) -> GroupView | None:
    """The group's coordinator, state and member count; None when no broker answered."""
    try:
        (future,) = client.describe_consumer_groups([group], request_timeout=timeout_s).values()
        described = future.result()
    except KafkaException:
        return None
    state = described.state.name if described.state is not None else "UNKNOWN"
    return GroupView(described.coordinator.id, state, len(described.members))


def describe_group_apart(bootstrap: str, group: str, timeout_s: float = 2.0) -> GroupView | None:
    """`describe_group` in a child process of its own. librdkafka 2.16 can abort the whole
    process (`rd_kafka_enq_once_del_source_return: Assertion eonce->refcnt > 0`) when the
    broker of an Admin request in flight is killed; a test that asks while it kills brokers
    loses one answer, not its process."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tests.support.kafkacluster", bootstrap, group, str(timeout_s)],
            cwd=Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            timeout=timeout_s + 10,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0 or not done.stdout.strip():
        return None
    said = json.loads(done.stdout)
    return GroupView(**said) if said else None


OFFSETS_TOPIC = "__consumer_offsets"


def java_hash(text: str) -> int:
    """Java's `String.hashCode` of *text* (ASCII), a signed 32-bit int."""
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_of(client: AdminClient, group: str, timeout_s: float = 5.0) -> int:
    """The broker that coordinates *group* (existing or not): the leader of its partition
    of the offsets topic, `Utils.abs(group.hashCode()) % partitions` as Kafka places it."""
    topic = client.list_topics(topic=OFFSETS_TOPIC, timeout=timeout_s).topics[OFFSETS_TOPIC]
    h = java_hash(group)
    index = (0 if h == -(1 << 31) else abs(h)) % len(topic.partitions)
    return int(topic.partitions[index].leader)


def wait_offsets_topic(bootstrap: str, timeout_s: float = 60.0) -> None:
    """Until the offsets topic exists with a leader for every partition (a coordinator
    look-up, which this asks for, makes the brokers create it)."""
    client = admin(bootstrap)
    deadline = time.monotonic() + timeout_s
    while True:
        describe_group(client, "sparkiq-test-make-the-offsets-topic")
        md = client.list_topics(timeout=5)
        topic = md.topics.get(OFFSETS_TOPIC)
        partitions = topic.partitions.values() if topic is not None else []
        if partitions and all(p.leader >= 0 for p in partitions):
            return
        assert time.monotonic() < deadline, f"no {OFFSETS_TOPIC} after {timeout_s:.0f} s"
        time.sleep(0.5)


def leaders(client: AdminClient, topics: Iterable[str], timeout_s: float = 5.0) -> Counter[int]:
    """How many partitions of *topics* each broker leads; asked again while the broker that
    answers does not know them all yet (a topic just made) or a partition has no leader."""
    wanted = list(topics)
    deadline = time.monotonic() + timeout_s
    while True:
        md = client.list_topics(timeout=timeout_s)
        found = [md.topics.get(t) for t in wanted]
        partitions = [p for t in found if t is not None for p in t.partitions.values()]
        if None not in found and all(p.leader >= 0 for p in partitions):
            return Counter(p.leader for p in partitions)
        assert time.monotonic() < deadline, f"no leaders of {wanted} after {timeout_s:.0f} s"
        time.sleep(0.2)


def under_replicated(client: AdminClient, timeout_s: float = 5.0) -> list[str]:
    """The partitions (of every topic) whose in-sync replicas are fewer than their replicas."""
    md = client.list_topics(timeout=timeout_s)
    return [
        f"{name}:{p.id}"
        for name, topic in md.topics.items()
        for p in topic.partitions.values()
        if len(p.isrs) < len(p.replicas)
    ]


def wait_all_in_sync(bootstrap: str, brokers: int, timeout_s: float = 120.0) -> float:
    """Until *brokers* brokers are registered and no partition is under-replicated; the
    seconds it took."""
    client = admin(bootstrap)
    started = time.monotonic()
    missing: list[str] | str = "no answer"
    while time.monotonic() - started < timeout_s:
        try:
            if len(client.list_topics(timeout=2).brokers) == brokers:
                missing = under_replicated(client)
                if not missing:
                    return time.monotonic() - started
            else:
                missing = "a broker not registered"
        except KafkaException as exc:
            missing = str(exc)
        time.sleep(0.5)
    raise AssertionError(f"replicas not in sync after {timeout_s:.0f} s: {missing}")


def replication(client: AdminClient, topic: str, timeout_s: float = 5.0) -> tuple[int, str]:
    """*topic*'s replication factor (of its first partition) and `min.insync.replicas`."""
    md = client.list_topics(topic=topic, timeout=timeout_s)
    replicas = len(md.topics[topic].partitions[0].replicas)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    (future,) = client.describe_configs([resource], request_timeout=timeout_s).values()
    return replicas, str(future.result()["min.insync.replicas"].value)


if __name__ == "__main__":  # `describe_group_apart`'s child
    view = describe_group(admin(sys.argv[1]), sys.argv[2], float(sys.argv[3]))
    print(json.dumps(asdict(view) if view is not None else None))
