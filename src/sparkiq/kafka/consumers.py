"""librdkafka settings shared by sparkiq's readers of offset ranges."""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import KafkaError as CKafkaError

# The "tuned" consumer of ../shared/BASELINES.md: large fetches and a deep local queue for
# throughput, a short fetch wait so a reader at the tail sees new records within ~100 ms;
# it never commits (positions live in RocksDB checkpoints or Spark's checkpoint).
TUNED_READ_CONF: Mapping[str, str | int | float | bool] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "earliest",
    "fetch.wait.max.ms": 100,
    "max.partition.fetch.bytes": 10 * 1024 * 1024,
    "fetch.max.bytes": 60 * 1024 * 1024,
    "queued.min.messages": 1_000_000,
}


def says_nothing_wrong(err: CKafkaError) -> bool:
    """Whether a consumer event is no failure: the end of a partition, or the brokers'
    refusal to find a coordinator for the group of a consumer that only uses assign() (its
    group.id is one librdkafka requires but it never joins; under ACLs the principal need
    have no right on it)."""
    return err.code() in (CKafkaError._PARTITION_EOF, CKafkaError.GROUP_AUTHORIZATION_FAILED)
