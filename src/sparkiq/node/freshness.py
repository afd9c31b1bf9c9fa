"""How fresh a table is on this node: the newest record it applied, the pipeline's last batch.

Two ages per table, read at scrape or request time, so operators see staleness without
sending a probe record through the pipeline:

- the age of the newest changelog record this node applied to any of its replicas of the
  table (the record's Kafka timestamp, which the pipeline's sink sets when it writes it,
  against now): how far behind the writes this node's answers are;
- the time since the table's pipeline last committed a micro-batch (`sparkiq run` publishes
  each one to the progress topic, which every node follows: `sparkiq.kafka.progress`): a
  pipeline that stopped, or is stuck in a long batch, shows here even while no record is
  due.

A table with no new input ages in the first figure but not in the second; a pipeline that
stalls ages in both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sparkiq.node.restore import PartitionStatus

__all__ = ["TableFreshness", "table_freshness"]


@dataclass(frozen=True, slots=True)
class TableFreshness:
    """The two instants a table's freshness is measured from (epoch ms; None: unknown)."""

    newest_record_ms: int | None  # Kafka timestamp of the newest record applied here
    last_batch_ms: int | None  # when the table's pipeline last committed a micro-batch

    def newest_record_age_s(self, now_ms: int) -> float | None:
        return _age_s(self.newest_record_ms, now_ms)

    def last_batch_age_s(self, now_ms: int) -> float | None:
        return _age_s(self.last_batch_ms, now_ms)

    def fields(self, now_ms: int) -> dict[str, float]:
        """`/v1/tables`' freshness fields; a field whose age is unknown is left out."""
        ages = (
            ("newest_record_age_s", self.newest_record_age_s(now_ms)),
            ("last_batch_age_s", self.last_batch_age_s(now_ms)),
        )
        return {name: age for name, age in ages if age is not None}


def _age_s(since_ms: int | None, now_ms: int) -> float | None:
    # Clocks of the pipeline's machine and this one may differ a little: never negative.
    return None if since_ms is None else max(now_ms - since_ms, 0) / 1000.0


def table_freshness(
    statuses: Iterable[PartitionStatus | None], last_batch_ms: int | None
) -> TableFreshness:
    """A table's freshness from its local replicas' statuses and its pipeline's last batch."""
    newest = [s.newest_record_ms for s in statuses if s is not None and s.newest_record_ms]
    return TableFreshness(max(newest) if newest else None, last_batch_ms or None)
