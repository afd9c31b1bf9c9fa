"""Where a replica goes on when its changelog's log start has moved past its position.

Retention (`cleanup.policy=delete`) and DeleteRecords remove records from the head of a
changelog. A replica whose position is below the new log start (the store of a node that was
stopped, a standby that fell behind) cannot fetch from there: the broker answers "offset out
of range". The restorer's consumer reports that instead of resetting by itself
(`auto.offset.reset=error`, `sparkiq.node.restore.fetch`), so that the replica goes on from
the log start with the offsets it never applied logged and counted
(`sparkiq_restore_truncated_offsets_total`). It keeps what it holds: the records removed
were never applied, and later ones are upserts of full values.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as CTopicPartition

from sparkiq.core.topology import TopicPartition
from sparkiq.node.restore.replica import Replica

log = logging.getLogger(__name__)


def resume_offset(position: int, log_start: int, end: int) -> int | None:
    """Where a replica goes on whose fetch from *position* the broker found out of range,
    given the partition's *log_start* and *end* now: the log start when *position* is before
    it (records removed) or past the end (the topic was made again; its store is then
    replayed from the start, as a consumer resetting to the earliest offset would); None
    when *position* is in range again (a passing state), to fetch once more from there."""
    if position < log_start or position > end:
        return log_start
    return None


def go_on_from_log_start(replica: Replica, log_start: int, end: int) -> int:
    """Move *replica* (its store's checkpoint and position) to where `resume_offset` says;
    the number of offsets it skips. The restorer fetches it again from its checkpoint."""
    tp, position = replica.tp, replica.position
    at = resume_offset(position, log_start, end)
    if at is None:
        return 0
    skipped = max(at - position, 0)
    if skipped:
        log.warning(
            "changelog %s[%d]: offsets %d to %d were removed from the log (retention or "
            "DeleteRecords) before this node's %s replica applied them; it goes on from the "
            "log start %d without them (%d offsets skipped)",
            tp[0],
            tp[1],
            position,
            at - 1,
            replica.state.value,
            at,
            skipped,
        )
    else:
        log.warning(
            "changelog %s[%d]: the store is at offset %d, past the changelog end %d (was the "
            "topic deleted and created again?); it is replayed from the log start %d",
            tp[0],
            tp[1],
            position,
            end,
            at,
        )
    replica.store.apply((), at, wal=replica.wal)
    replica.position = at
    replica.end = max(replica.end, at)
    return skipped


def log_bounds(
    consumer: Consumer, tps: Iterable[TopicPartition], timeout_s: float = 5.0
) -> dict[TopicPartition, tuple[int, int]]:
    """(log start, end) of each of *tps* as the broker lists them now; a partition whose
    bounds cannot be read now is left out (it is fetched again, and asked again)."""
    out: dict[TopicPartition, tuple[int, int]] = {}
    for t, p in tps:
        try:
            low, high = consumer.get_watermark_offsets(CTopicPartition(t, p), timeout=timeout_s)
        except KafkaException as exc:
            log.warning("cannot read the log start of %s[%d]: %s; retrying", t, p, exc)
            continue
        if low >= 0 and high >= 0:
            out[(t, p)] = (low, high)
    return out
