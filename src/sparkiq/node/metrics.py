"""The node's state as Prometheus metrics: partitions by state, lag, restore progress, group.

`NodeMetrics` is a collector read at scrape time: it asks the node for its replicas'
statuses and its cluster map when `/metrics` is fetched, and costs nothing in between.
It is registered in the registry of the node's `HttpMetrics` (see `sparkiq.cli.serving`), so one
`/metrics` answer carries both.

Each local replica is in exactly one state: `restoring` (active role, catching up),
`active`, `standby`, or `warming` (a standby the assignment is about to make active, see
`sparkiq.node.group.assignment`). The series:

| metric | type | labels |
|---|---|---|
| `sparkiq_partitions` | gauge | table, state |
| `sparkiq_partition_lag` | gauge | table, partition, state |
| `sparkiq_partition_position` | gauge | table, partition, state |
| `sparkiq_partition_end_offset` | gauge | table, partition, state |
| `sparkiq_restore_remaining_offsets` | gauge | table, partition (restoring only) |
| `sparkiq_restore_progress_ratio` | gauge | table, partition (restoring only) |
| `sparkiq_restore_records_total` | counter | |
| `sparkiq_restore_skipped_records_total` | counter | |
| `sparkiq_restore_refetches_total` | counter | |
| `sparkiq_restore_truncated_offsets_total` | counter | table, partition (once some were) |
| `sparkiq_group_generation` | gauge | |
| `sparkiq_group_rebalance_bytes` | gauge | part (once the node led a rebalance) |
| `sparkiq_group_led_generation`, `sparkiq_group_led_members` | gauge | (likewise) |
| `sparkiq_group_map_received_timestamp_seconds` | gauge | (once the node has a map) |
| `sparkiq_cluster_nodes` | gauge | |
| `sparkiq_ready` | gauge | |
| `sparkiq_kafka_unreachable_seconds` | gauge | |
| `sparkiq_tables` | gauge | |
| `sparkiq_misplaced_records` | gauge | table |
| `sparkiq_table_newest_record_age_seconds` | gauge | table (once a record was applied) |
| `sparkiq_table_last_batch_age_seconds` | gauge | table (once its pipeline committed a batch) |
| `sparkiq_stores_open` | gauge | (given the node's `StateCleanup`) |
| `sparkiq_store_cleanups_total` | counter | (likewise) |
| `sparkiq_store_cleanups_pending` | gauge | (likewise) |
| `sparkiq_store_memory_bytes` | gauge | part: budget, used, memtables (with a memory budget) |
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from enum import StrEnum
from typing import Protocol

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sparkiq.core.tables import TableDef
from sparkiq.core.topology import ClusterMap, TopicPartition
from sparkiq.node.brokercontact import BrokerContact
from sparkiq.node.freshness import TableFreshness
from sparkiq.node.group.assignor import RebalanceBytes
from sparkiq.node.restore import PartitionStatus, ReplicaState
from sparkiq.node.restore.progress import RestoreProgress, fraction_done
from sparkiq.node.stores.cleanup import StateCleanup


class PartitionState(StrEnum):
    """The `state` label of a local replica."""

    RESTORING = "restoring"
    ACTIVE = "active"
    STANDBY = "standby"
    WARMING = "warming"
    FAILED = "failed"


class RestorerCounts(Protocol):
    """What the collector reads from the restorer (`sparkiq.node.restore.Restorer`)."""

    @property
    def records_applied(self) -> int: ...

    @property
    def skipped_records(self) -> int: ...

    @property
    def refetches(self) -> int: ...

    @property
    def storage_faults(self) -> int: ...

    @property
    def rebuilds(self) -> int: ...

    @property
    def windows_expired(self) -> int: ...

    @property
    def truncated_offsets(self) -> Mapping[tuple[str, int], int]: ...

    def statuses(self) -> Mapping[TopicPartition, PartitionStatus]: ...


class ObservedNode(Protocol):
    """What the collector reads from the node (`sparkiq.node.node.Node`)."""

    @property
    def url(self) -> str: ...

    @property
    def cluster_map(self) -> ClusterMap: ...

    @property
    def restorer(self) -> RestorerCounts: ...

    @property
    def brokers(self) -> BrokerContact: ...

    def tables(self) -> Sequence[TableDef]: ...

    def is_ready(self) -> bool: ...

    def misplaced_records(self, table: str) -> int: ...

    def freshness(self, table: TableDef) -> TableFreshness: ...


class ObservedGroup(Protocol):
    """What the collector reads from the node's group member (`GroupMember`)."""

    @property
    def last_rebalance(self) -> RebalanceBytes | None: ...

    @property
    def map_received_at(self) -> float | None: ...


def state_of(status: PartitionStatus, warming: frozenset[TopicPartition]) -> PartitionState:
    """The `state` label of a local replica: its restorer state, or warming."""
    if status.state is ReplicaState.RESTORING:
        return PartitionState.RESTORING
    if status.state is ReplicaState.ACTIVE:
        return PartitionState.ACTIVE
    if status.state is ReplicaState.FAILED:
        return PartitionState.FAILED
    return PartitionState.WARMING if status.tp in warming else PartitionState.STANDBY


class NodeMetrics(Collector):
    """Reads the node at scrape time; `progress` (if given) says where restores began."""

    def __init__(
        self,
        node: ObservedNode,
        progress: RestoreProgress | None = None,
        group: ObservedGroup | None = None,
        stores: StateCleanup | None = None,
    ) -> None:
        """`group`: the node's group member (`GroupMember`), for the group's series;
        `stores`: its `StateCleanup` (and through it its registry), for the stores' series."""
        self.node = node
        self.progress = progress
        self.group = group
        self.stores = stores

    def collect(self) -> Iterator[Metric]:
        node = self.node
        cluster_map = node.cluster_map
        restorer = node.restorer
        statuses = sorted(restorer.statuses().items())
        tables = node.tables()
        warming = cluster_map.warming_of(node.url)

        partitions = GaugeMetricFamily(
            "sparkiq_partitions",
            "Local replicas by table and state (restoring, active, standby, warming, failed).",
            labels=("table", "state"),
        )
        lag = GaugeMetricFamily(
            "sparkiq_partition_lag",
            "Offsets a local replica is behind its changelog's end.",
            labels=("table", "partition", "state"),
        )
        position = GaugeMetricFamily(
            "sparkiq_partition_position",
            "Next changelog offset a local replica will apply.",
            labels=("table", "partition", "state"),
        )
        end = GaugeMetricFamily(
            "sparkiq_partition_end_offset",
            "The changelog's end offset as a local replica last saw it.",
            labels=("table", "partition", "state"),
        )
        remaining = GaugeMetricFamily(
            "sparkiq_restore_remaining_offsets",
            "Offsets a restoring replica still has to apply before it serves.",
            labels=("table", "partition"),
        )
        ratio = GaugeMetricFamily(
            "sparkiq_restore_progress_ratio",
            "Fraction of a restoring replica's restore done (0..1), since it began.",
            labels=("table", "partition"),
        )
        # Every table in every state, zeros included: a state that empties reads 0, not absent.
        counts = {(t.name, s): 0 for t in tables for s in PartitionState}
        for tp, st in statuses:
            state = state_of(st, warming)
            counts[(st.table, state)] = counts.get((st.table, state), 0) + 1
            labels = (st.table, str(tp[1]), state.value)
            lag.add_metric(labels, st.lag)
            position.add_metric(labels, st.position)
            end.add_metric(labels, st.end)
            if state is PartitionState.RESTORING:
                remaining.add_metric(labels[:2], st.lag)
                start = self.progress.start_of(tp) if self.progress is not None else None
                began = st.position if start is None else start
                ratio.add_metric(labels[:2], fraction_done(began, st.position, st.end))
        for (table, state), n in sorted(counts.items()):
            partitions.add_metric((table, state.value), n)
        yield partitions
        yield lag
        yield position
        yield end
        yield remaining
        yield ratio
        yield CounterMetricFamily(
            "sparkiq_restore_records",
            "Changelog records written to local stores since the node started (tombstones too).",
            value=restorer.records_applied,
        )
        yield CounterMetricFamily(
            "sparkiq_restore_skipped_records",
            "Changelog records skipped for want of a usable key, since the node started.",
            value=restorer.skipped_records,
        )
        truncated = CounterMetricFamily(
            "sparkiq_restore_truncated_offsets",
            "Changelog offsets skipped because the log start had moved past the replica's "
            "position (retention or DeleteRecords removed them before they were applied), "
            "since the node started.",
            labels=("table", "partition"),
        )
        for (table_name, partition), skipped in sorted(restorer.truncated_offsets.items()):
            truncated.add_metric((table_name, str(partition)), skipped)
        yield truncated
        yield CounterMetricFamily(
            "sparkiq_restore_refetches",
            "Partitions fetched again from their store's checkpoint (consumer and store were "
            "out of step, e.g. after a failed write).",
            value=restorer.refetches,
        )
        yield CounterMetricFamily(
            "sparkiq_storage_faults",
            "Local replicas whose store's files failed them (RocksDB corruption or I/O "
            "error, a full disk), since the node started.",
            value=restorer.storage_faults,
        )
        yield CounterMetricFamily(
            "sparkiq_store_rebuilds",
            "Stores moved aside and rebuilt from the changelog after a storage fault, since "
            "the node started.",
            value=restorer.rebuilds,
        )
        yield CounterMetricFamily(
            "sparkiq_windows_expired",
            "Windows removed from local stores because they ended more than their table's "
            "retention before the newest window of their partition, since the node started.",
            value=restorer.windows_expired,
        )
        yield GaugeMetricFamily(
            "sparkiq_group_generation",
            "Consumer group generation of the cluster map this node holds (-1: none yet).",
            value=cluster_map.generation,
        )
        group = self.group
        if group is not None and group.map_received_at is not None:
            yield GaugeMetricFamily(
                "sparkiq_group_map_received_timestamp_seconds",
                "When this node received the cluster map it holds (Unix time).",
                value=group.map_received_at,
            )
        led = group.last_rebalance if group is not None else None
        if led is not None:
            sizes = GaugeMetricFamily(
                "sparkiq_group_rebalance_bytes",
                "Bytes of the last rebalance this node led as group leader: the members' "
                "subscriptions and the assignments it wrote through Kafka, the largest "
                "assignment, and the encoded map (`inline` 1: in every assignment; 0: by "
                "reference, fetched over HTTP).",
                labels=["part"],
            )
            sizes.add_metric(["subscriptions"], led.subscriptions)
            sizes.add_metric(["assignments"], led.assignments)
            sizes.add_metric(["largest_assignment"], led.largest_assignment)
            sizes.add_metric(["map"], led.map_bytes)
            sizes.add_metric(["inline"], 1 if led.inline else 0)
            yield sizes
            yield GaugeMetricFamily(
                "sparkiq_group_led_generation",
                "Generation of the last rebalance this node led as group leader.",
                value=led.generation,
            )
            yield GaugeMetricFamily(
                "sparkiq_group_led_members",
                "Members of the group in the last rebalance this node led.",
                value=led.members,
            )
        yield GaugeMetricFamily(
            "sparkiq_cluster_nodes",
            "Nodes named in the cluster map this node holds.",
            value=len(cluster_map.urls()),
        )
        yield GaugeMetricFamily(
            "sparkiq_ready",
            "1 when the node has joined and all its active partitions serve (as /readyz).",
            value=1 if node.is_ready() else 0,
        )
        since = node.brokers.state.since
        yield GaugeMetricFamily(
            "sparkiq_kafka_unreachable_seconds",
            "Seconds since the node found every Kafka broker down (0 while one answers); it "
            "serves what it holds meanwhile.",
            value=0.0 if since is None else max(time.time() - since, 0.0),
        )
        yield GaugeMetricFamily(
            "sparkiq_tables", "Tables the node knows from the catalog.", value=len(tables)
        )
        misplaced = GaugeMetricFamily(
            "sparkiq_misplaced_records",
            "Records the cluster found in another partition than the table's partitioner "
            "gives their keys (lookups that miss then ask every partition).",
            labels=("table",),
        )
        for tdef in tables:
            misplaced.add_metric((tdef.name,), node.misplaced_records(tdef.name))
        yield misplaced
        yield from _freshness(node, tables)
        if self.stores is not None:
            yield from _stores(self.stores)


def _stores(cleanup: StateCleanup) -> Iterator[Metric]:
    registry = cleanup.registry
    yield GaugeMetricFamily(
        "sparkiq_stores_open", "RocksDB stores this node holds open.", value=registry.open_count()
    )
    yield CounterMetricFamily(
        "sparkiq_store_cleanups",
        "Store directories deleted because the node no longer held their partitions for "
        "--state-cleanup-delay-s (quarantined copies included), since the node started.",
        value=cleanup.deleted,
    )
    yield GaugeMetricFamily(
        "sparkiq_store_cleanups_pending",
        "Store directories on disk that are not open here, to be deleted once their delay "
        "is over (listed in /v1/metadata under cleanup).",
        value=len(cleanup.pending()),
    )
    memory = registry.memory
    if memory is not None:
        family = GaugeMetricFamily(
            "sparkiq_store_memory_bytes",
            "The memory budget all stores share (--store-memory-mb), what is charged to it "
            "(cached blocks and memtables), and the memtables' part.",
            labels=("part",),
        )
        family.add_metric(("budget",), memory.budget_bytes)
        family.add_metric(("used",), memory.usage())
        family.add_metric(("memtables",), memory.memtable_usage())
        yield family


def _freshness(node: ObservedNode, tables: Sequence[TableDef]) -> Iterator[Metric]:
    newest = GaugeMetricFamily(
        "sparkiq_table_newest_record_age_seconds",
        "Seconds since the newest changelog record this node applied of the table was "
        "written (its Kafka timestamp).",
        labels=("table",),
    )
    batch = GaugeMetricFamily(
        "sparkiq_table_last_batch_age_seconds",
        "Seconds since the table's pipeline last committed a micro-batch (its progress topic).",
        labels=("table",),
    )
    now_ms = time.time_ns() // 1_000_000
    for tdef in tables:
        fresh = node.freshness(tdef)
        record_age = fresh.newest_record_age_s(now_ms)
        if record_age is not None:
            newest.add_metric((tdef.name,), record_age)
        batch_age = fresh.last_batch_age_s(now_ms)
        if batch_age is not None:
            batch.add_metric((tdef.name,), batch_age)
    yield newest
    yield batch
