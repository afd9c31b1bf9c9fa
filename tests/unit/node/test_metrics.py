"""Node metrics read at scrape time (node/metrics.py), from a fake node and restorer (and
real stores for the stores' series)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sparkiq.core.tables import TableDef
from sparkiq.core.topology import ClusterMap, PartitionOwners, TopicPartition
from sparkiq.node.brokercontact import BrokerContact
from sparkiq.node.freshness import TableFreshness
from sparkiq.node.metrics import NodeMetrics, PartitionState
from sparkiq.node.restore import PartitionStatus, ReplicaState
from sparkiq.node.restore.progress import RestoreProgress
from sparkiq.node.stores.cleanup import StateCleanup
from sparkiq.node.stores.registry import StoreRegistry
from sparkiq.node.stores.storeoptions import SharedMemory

ME, OTHER = "http://127.0.0.1:8101", "http://127.0.0.1:8102"
USERS = TableDef("users", "users-changelog", 4)
ORDERS = TableDef("orders", "orders-changelog", 2)


def status(
    table: TableDef, p: int, state: ReplicaState, position: int, end: int
) -> PartitionStatus:
    return PartitionStatus(
        (table.topic, p), table.name, state, position, end, max(end - position, 0)
    )


@dataclass
class FakeRestorer:
    """The restorer's read side, set by the test."""

    by_tp: dict[TopicPartition, PartitionStatus] = field(default_factory=dict)
    records_applied: int = 0
    skipped_records: int = 0
    refetches: int = 0
    storage_faults: int = 0
    rebuilds: int = 0
    windows_expired: int = 0
    truncated_offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    def statuses(self) -> Mapping[TopicPartition, PartitionStatus]:
        return dict(self.by_tp)

    def put(self, *statuses: PartitionStatus) -> None:
        for st in statuses:
            self.by_tp[st.tp] = st


@dataclass
class FakeNode:
    url: str
    restorer: FakeRestorer
    cluster_map: ClusterMap = field(default_factory=ClusterMap)
    known: Sequence[TableDef] = (USERS, ORDERS)
    ready: bool = False
    misplaced: dict[str, int] = field(default_factory=dict)
    fresh: dict[str, TableFreshness] = field(default_factory=dict)
    brokers: BrokerContact = field(default_factory=lambda: BrokerContact("k:9092"))

    def freshness(self, table: TableDef) -> TableFreshness:
        return self.fresh.get(table.name, TableFreshness(None, None))

    def tables(self) -> Sequence[TableDef]:
        return self.known

    def is_ready(self) -> bool:
        return self.ready

    def misplaced_records(self, table: str) -> int:
        return self.misplaced.get(table, 0)


def scrape(node: FakeNode, progress: RestoreProgress | None = None) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(NodeMetrics(node, progress))
    return registry


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


@pytest.fixture
def node() -> FakeNode:
    restorer = FakeRestorer(
        records_applied=1_234,
        skipped_records=2,
        refetches=1,
        storage_faults=3,
        rebuilds=2,
        windows_expired=5,
        truncated_offsets={("users", 1): 40},
    )
    restorer.put(
        status(USERS, 0, ReplicaState.ACTIVE, 500, 500),
        status(USERS, 1, ReplicaState.RESTORING, 300, 1_000),
        status(USERS, 2, ReplicaState.STANDBY, 90, 100),
        status(USERS, 3, ReplicaState.STANDBY, 40, 100),
    )
    owners = {
        (USERS.topic, 0): PartitionOwners(ME, (OTHER,)),
        (USERS.topic, 1): PartitionOwners(ME, (OTHER,)),
        (USERS.topic, 2): PartitionOwners(OTHER, (ME,)),
        (USERS.topic, 3): PartitionOwners(OTHER, (), (ME,)),
    }
    return FakeNode(ME, restorer, ClusterMap(7, owners, {ME: {}, OTHER: {}}))


def test_partitions_by_table_and_state(node: FakeNode) -> None:
    r = scrape(node)
    assert value(r, "sparkiq_partitions", table="users", state="active") == 1
    assert value(r, "sparkiq_partitions", table="users", state="restoring") == 1
    assert value(r, "sparkiq_partitions", table="users", state="standby") == 1
    assert value(r, "sparkiq_partitions", table="users", state="warming") == 1
    # A table with no local replica still has its series, at zero.
    for state in PartitionState:
        assert value(r, "sparkiq_partitions", table="orders", state=state.value) == 0


def test_lag_position_and_end_per_partition(node: FakeNode) -> None:
    r = scrape(node)
    assert value(r, "sparkiq_partition_lag", table="users", partition="1", state="restoring") == (
        700
    )
    assert value(r, "sparkiq_partition_lag", table="users", partition="2", state="standby") == 10
    assert value(r, "sparkiq_partition_lag", table="users", partition="3", state="warming") == 60
    assert value(r, "sparkiq_partition_lag", table="users", partition="0", state="active") == 0
    assert (
        value(r, "sparkiq_partition_position", table="users", partition="2", state="standby") == 90
    )
    assert (
        value(r, "sparkiq_partition_end_offset", table="users", partition="1", state="restoring")
        == 1_000
    )


def test_restore_progress_and_counters(node: FakeNode) -> None:
    progress = RestoreProgress()
    # The restore of partition 1 began at offset 200 ...
    node.restorer.put(status(USERS, 1, ReplicaState.RESTORING, 200, 1_000))
    progress.update(node.restorer.statuses(), node.restorer.records_applied, now=0.0)
    # ... and is at 300 of 1000 when scraped.
    node.restorer.put(status(USERS, 1, ReplicaState.RESTORING, 300, 1_000))
    r = scrape(node, progress)
    assert value(r, "sparkiq_restore_remaining_offsets", table="users", partition="1") == 700
    assert value(r, "sparkiq_restore_progress_ratio", table="users", partition="1") == 0.125
    assert value(r, "sparkiq_restore_remaining_offsets", table="users", partition="0") is None
    assert value(r, "sparkiq_restore_records_total") == 1_234
    assert value(r, "sparkiq_restore_skipped_records_total") == 2
    assert value(r, "sparkiq_restore_refetches_total") == 1
    assert value(r, "sparkiq_storage_faults_total") == 3
    assert value(r, "sparkiq_store_rebuilds_total") == 2
    assert value(r, "sparkiq_windows_expired_total") == 5
    assert value(r, "sparkiq_restore_truncated_offsets_total", table="users", partition="1") == 40
    assert value(r, "sparkiq_restore_truncated_offsets_total", table="users", partition="0") is None
    # Without progress tracking the restore counts from where it is now.
    assert value(scrape(node), "sparkiq_restore_progress_ratio", table="users", partition="1") == 0


def test_group_ready_and_tables(node: FakeNode) -> None:
    r = scrape(node)
    assert value(r, "sparkiq_group_generation") == 7
    assert value(r, "sparkiq_cluster_nodes") == 2
    assert value(r, "sparkiq_ready") == 0
    assert value(r, "sparkiq_tables") == 2
    node.ready = True
    assert value(r, "sparkiq_ready") == 1  # read again at each scrape


def test_how_long_the_brokers_have_been_unreachable(node: FakeNode) -> None:
    r = scrape(node)
    assert value(r, "sparkiq_kafka_unreachable_seconds") == 0
    node.brokers.lost("every broker is down")
    node.brokers.state = replace(node.brokers.state, since=time.time() - 30)
    seconds = value(r, "sparkiq_kafka_unreachable_seconds")
    assert seconds is not None
    assert 30 <= seconds < 40
    node.brokers.reached()
    assert value(r, "sparkiq_kafka_unreachable_seconds") == 0


def test_values_follow_the_node_between_scrapes(node: FakeNode) -> None:
    r = scrape(node)
    node.restorer.put(status(USERS, 1, ReplicaState.ACTIVE, 1_000, 1_000))
    node.restorer.records_applied += 700
    assert value(r, "sparkiq_partitions", table="users", state="restoring") == 0
    assert value(r, "sparkiq_partitions", table="users", state="active") == 2
    assert value(r, "sparkiq_restore_records_total") == 1_934
    assert value(r, "sparkiq_restore_remaining_offsets", table="users", partition="1") is None


def test_an_empty_node_scrapes() -> None:
    r = scrape(FakeNode(ME, FakeRestorer(), known=()))
    assert value(r, "sparkiq_group_generation") == -1
    assert value(r, "sparkiq_tables") == 0
    assert value(r, "sparkiq_restore_records_total") == 0


def test_misplaced_records_per_table(node: FakeNode) -> None:
    node.misplaced["users"] = 7
    r = scrape(node)
    assert value(r, "sparkiq_misplaced_records", table="users") == 7
    assert value(r, "sparkiq_misplaced_records", table="orders") == 0


def test_freshness_per_table_once_known(node: FakeNode) -> None:
    now_ms = time.time_ns() // 1_000_000
    node.fresh["users"] = TableFreshness(
        newest_record_ms=now_ms - 2_500, last_batch_ms=now_ms - 400
    )
    node.fresh["orders"] = TableFreshness(newest_record_ms=None, last_batch_ms=now_ms - 60_000)
    r = scrape(node)
    record_age = value(r, "sparkiq_table_newest_record_age_seconds", table="users")
    batch_age = value(r, "sparkiq_table_last_batch_age_seconds", table="users")
    assert record_age is not None
    assert 2.5 <= record_age < 12.5
    assert batch_age is not None
    assert 0.4 <= batch_age < 10.4
    # No record applied yet: no series (not a made-up age); the pipeline's still shows.
    assert value(r, "sparkiq_table_newest_record_age_seconds", table="orders") is None
    orders_batch = value(r, "sparkiq_table_last_batch_age_seconds", table="orders")
    assert orders_batch is not None
    assert orders_batch >= 60


def test_the_stores_series_come_from_the_registry_and_its_cleanup(
    node: FakeNode, tmp_path: Path
) -> None:
    memory = SharedMemory(64 << 20)
    stores = StoreRegistry(tmp_path, memory)
    cleanup = StateCleanup(stores, 0.0)
    for p in range(3):
        stores.open(USERS, p).apply([(b"k", b"v" * 100)], 1)
    stores.close(USERS.name, 2)
    stores.close(USERS.name, 1)
    registry = CollectorRegistry()
    registry.register(NodeMetrics(node, stores=cleanup))
    assert registry.get_sample_value("sparkiq_stores_open") == 1
    assert registry.get_sample_value("sparkiq_store_cleanups_pending") == 2
    assert registry.get_sample_value("sparkiq_store_cleanups_total") == 0
    assert registry.get_sample_value("sparkiq_store_memory_bytes", {"part": "budget"}) == (64 << 20)
    used = registry.get_sample_value("sparkiq_store_memory_bytes", {"part": "used"})
    assert used is not None
    assert used > 0  # the open store's memtables
    cleanup.sweep()
    assert registry.get_sample_value("sparkiq_store_cleanups_total") == 2
    assert registry.get_sample_value("sparkiq_store_cleanups_pending") == 0
    stores.close_all()
    # A node without a budget has no memory series.
    bare = CollectorRegistry()
    bare.register(NodeMetrics(node, stores=StateCleanup(StoreRegistry(tmp_path / "b"), 1.0)))
    assert bare.get_sample_value("sparkiq_store_memory_bytes", {"part": "budget"}) is None
    assert scrape(node).get_sample_value("sparkiq_stores_open") is None  # not given: absent
