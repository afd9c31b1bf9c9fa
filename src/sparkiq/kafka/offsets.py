"""End offsets that can be trusted, also on the dev broker.

On a cluster whose ListOffsets answers are true ends (Apache Kafka; learned once per cluster
by `sparkiq.kafka.endreports`) an end is one ListOffsets, and nothing below runs. The rest of
this module is for a broker that answers otherwise, the dev broker:

The dev broker reports a partition's high watermark as the base offset of the last record
batch + 1, not the last offset + 1 (../shared/BASELINES.md). A reader that stops at the
reported end misses the tail of the last batch. `true_end_offsets` reads from the reported
end - 1 and takes the last offset actually returned + 1; on real Kafka this gives the same
answer as the watermark.

A partition's tail is known as soon as its first record at or past the reported end - 1
arrives: librdkafka hands a fetch response's records of a partition to the application all
at once (the message set is parsed into a queue of its own, then joined to the consumer's),
so the rest of that last batch is already queued and is drained without waiting. The read
does not wait for the end-of-partition event, which comes only after a further fetch at the
tail has waited out ``fetch.wait.max.ms``.

A caller that knows a true end from before (the Spark source, every micro-batch) needs no
ListOffsets at all: `ends_after` fetches once from there, and a fetch response carries the
partition's high watermark, which the dev broker reports right in it (it is only ListOffsets
that answers with the last batch's base offset + 1). Each ListOffsets and each fetch below
the end has the dev broker list every record batch of the partition (thousands after a few
minutes of the demo); a fetch at the end lists none.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator, Mapping

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition
from confluent_kafka import KafkaError as CKafkaError

from sparkiq.kafka.clientlog import LOG_CONF
from sparkiq.kafka.endreports import lists_true_ends
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity

TopicPartitionKey = tuple[str, int]

# librdkafka settings that make a short read of a partition tail return at once.
_PROBE_CONF: Mapping[str, str | int | float | bool] = {
    "enable.auto.commit": False,
    "enable.partition.eof": True,
    "fetch.wait.max.ms": 10,
    "auto.offset.reset": "latest",
}


# What a fetch answers per partition, for a probe that reads from an end it found before
# (`ends_after`): the answer is needed only for the high watermark it carries, and the
# records since that end (a micro-batch's writes: megabytes in a burst) would cost the dev
# broker a copy each, then be thrown away.
FOLLOWING_FETCH_BYTES = 64 * 1024


def probe_consumer(
    bootstrap_servers: str,
    security: KafkaSecurity = PLAINTEXT,
    *,
    max_partition_fetch_bytes: int | None = None,
) -> Consumer:
    """A group-less consumer for offset look-ups (*max_partition_fetch_bytes*: librdkafka's
    ``max.partition.fetch.bytes``, `FOLLOWING_FETCH_BYTES` for `ends_after`)."""
    conf: dict[str, str | int | float | bool] = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": f"sparkiq-probe-{uuid.uuid4()}",
    }
    conf.update(security.librdkafka_conf())
    conf.update(_PROBE_CONF)
    if max_partition_fetch_bytes is not None:
        conf["max.partition.fetch.bytes"] = max_partition_fetch_bytes
    return Consumer({**conf, **LOG_CONF})


# A partition whose leader is being elected (a topic just created, a broker restarting)
# answers with these for a moment, and so does one whose leader has just died: librdkafka
# fails a request in flight to a broker that dropped out of the cluster's metadata (a
# killed KRaft broker is fenced and listed no more) with _DESTROY_BROKER, or with _TRANSPORT
# when the connection broke. Asked again, the request goes to the new leader; asked again
# until the timeout.
_PASSING = frozenset(
    {
        CKafkaError.NOT_LEADER_FOR_PARTITION,
        CKafkaError.LEADER_NOT_AVAILABLE,
        CKafkaError.UNKNOWN_TOPIC_OR_PART,
        CKafkaError._DESTROY_BROKER,
        CKafkaError._TRANSPORT,
    }
)


def watermarks(
    consumer: Consumer, partitions: Iterable[TopicPartitionKey], timeout_s: float = 10.0
) -> dict[TopicPartitionKey, tuple[int, int]]:
    """(low, reported high) watermark per partition, as the broker reports them; a
    partition without a leader yet, or whose leader just went, is asked again until
    `timeout_s` has passed."""
    deadline = time.monotonic() + timeout_s
    marks: dict[TopicPartitionKey, tuple[int, int]] = {}
    for t, p in partitions:
        while True:
            remaining = max(deadline - time.monotonic(), 0.1)
            try:
                low, high = consumer.get_watermark_offsets(TopicPartition(t, p), timeout=remaining)
            except KafkaException as exc:
                err = exc.args[0]
                if err.code() not in _PASSING or time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
                continue
            marks[(t, p)] = (low, high)
            break
    return marks


def true_end_offsets(
    bootstrap_servers: str,
    partitions: Iterable[TopicPartitionKey],
    *,
    timeout_s: float = 10.0,
    consumer: Consumer | None = None,
    security: KafkaSecurity = PLAINTEXT,
) -> dict[TopicPartitionKey, int]:
    """The offset after the last record of each partition (0 for an empty one).

    *consumer* (already configured) is used if given; otherwise a probe consumer is made
    with *security*, the settings the cluster is reached with either way.
    """
    own = consumer is None
    c = consumer if consumer is not None else probe_consumer(bootstrap_servers, security)
    try:
        marks = watermarks(c, partitions, timeout_s)
        if lists_true_ends(bootstrap_servers, marks, security.librdkafka_conf()):
            return {tp: high for tp, (_low, high) in marks.items()}
        ends: dict[TopicPartitionKey, int] = {}
        to_probe: dict[TopicPartitionKey, int] = {}
        for tp, (low, high) in marks.items():
            ends[tp] = high
            if high > low:
                to_probe[tp] = high - 1
        if to_probe:
            _read_tails(c, to_probe, ends, timeout_s)
        return ends
    finally:
        if own:
            c.close()


def _read_tails(
    consumer: Consumer,
    starts: Mapping[TopicPartitionKey, int],
    ends: dict[TopicPartitionKey, int],
    timeout_s: float,
) -> None:
    consumer.assign([TopicPartition(t, p, off) for (t, p), off in starts.items()])
    pending = set(starts)
    deadline = time.monotonic() + timeout_s

    def take(tp: TopicPartitionKey, offset: int, err: CKafkaError | None) -> None:
        if tp not in starts:
            return  # left over from an earlier assignment of a reused consumer
        if err is not None:
            if err.code() == CKafkaError._PARTITION_EOF:
                ends[tp] = max(ends[tp], offset)
                pending.discard(tp)
            return
        ends[tp] = max(ends[tp], offset + 1)
        if offset >= starts[tp]:
            pending.discard(tp)  # the last batch has come: the rest of it is queued

    try:
        for answer in _answers(consumer, pending, deadline):
            take(*answer)
        # The rest of the last batches, already queued (see the module); a bounded number
        # of calls, since records produced meanwhile may keep arriving.
        for _ in range(_DRAIN_CALLS):
            queued = consumer.consume(num_messages=10_000, timeout=0)
            if not queued:
                break
            for answer in _decoded(queued):
                take(*answer)
    finally:
        consumer.unassign()


_DRAIN_CALLS = 20


def ends_after(
    consumer: Consumer, known: Mapping[TopicPartitionKey, int], timeout_s: float = 10.0
) -> dict[TopicPartitionKey, int]:
    """The true end of each partition in *known*, each given a true end read before.

    One fetch per partition from its known end: the response's high watermark (kept by
    librdkafka, see the module) is the end now. A partition that gives no answer within
    *timeout_s* is left out; `true_end_offsets` reads it the long way.
    """
    ends: dict[TopicPartitionKey, int] = {}
    if not known:
        return ends
    consumer.assign([TopicPartition(t, p, off) for (t, p), off in known.items()])
    pending = set(known)
    deadline = time.monotonic() + timeout_s
    try:
        for tp, offset, err in _answers(consumer, pending, deadline):
            if tp not in pending or (err is not None and err.code() != CKafkaError._PARTITION_EOF):
                continue  # answered already, or a transient error librdkafka retries
            # A record or the end-of-partition event comes out of a fetch response handled
            # after the watermark it carried was kept.
            _low, high = consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
            ends[tp] = max(high, offset if err is not None else offset + 1)
            pending.discard(tp)
    finally:
        consumer.unassign()
    return ends


def ends_from(
    consumer: Consumer,
    bootstrap_servers: str,
    partitions: Iterable[TopicPartitionKey],
    known: Mapping[TopicPartitionKey, int],
    *,
    security: KafkaSecurity,
) -> dict[TopicPartitionKey, int]:
    """The true end of each of *partitions*, through *consumer* (made with *security*): on a
    cluster whose ListOffsets gives true ends, one ListOffsets; else one fetch from its end
    in *known* where it has one (`ends_after`), else, or when that gets no answer, the long
    way (`true_end_offsets`)."""
    wanted = list(partitions)
    if lists_true_ends(bootstrap_servers, wanted, security.librdkafka_conf()):
        return true_end_offsets(bootstrap_servers, wanted, consumer=consumer, security=security)
    ends = ends_after(consumer, {tp: known[tp] for tp in wanted if tp in known})
    rest = [tp for tp in wanted if tp not in ends]
    if rest:
        ends.update(true_end_offsets(bootstrap_servers, rest, consumer=consumer, security=security))
    return ends


def _answers(
    consumer: Consumer, pending: set[TopicPartitionKey], deadline: float
) -> Iterator[tuple[TopicPartitionKey, int, CKafkaError | None]]:
    """What the assigned partitions answer, as (partition, offset, error), while some of
    *pending* (which the caller shrinks) have not answered and *deadline* has not passed."""
    while pending and time.monotonic() < deadline:
        # consume() waits for the whole count or the timeout; one answer per partition still
        # pending is all a caller needs, so a small count returns at once.
        yield from _decoded(consumer.consume(num_messages=len(pending), timeout=0.2))


def _decoded(
    messages: Iterable[Message],
) -> Iterator[tuple[TopicPartitionKey, int, CKafkaError | None]]:
    """(partition, offset, error) of each of *messages* that names all three."""
    for msg in messages:
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        if topic is not None and partition is not None and offset is not None:
            yield (topic, partition), offset, msg.error()
