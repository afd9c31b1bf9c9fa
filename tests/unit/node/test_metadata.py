"""The cluster map and the local replicas as `/v1/metadata` shows them (no Kafka)."""

from __future__ import annotations

from sparkiq.core.tables import TableDef
from sparkiq.core.topology import ClusterMap, PartitionOwners, TopicPartition
from sparkiq.node.metadata import describe_local, describe_map
from sparkiq.node.restore import PartitionStatus, ReplicaState

A, B = "http://node-a:8100", "http://node-b:8100"
TP: TopicPartition = ("items-topic", 0)
TABLES = {"items-topic": TableDef("items", "items-topic", 1)}


def test_partitions_and_nodes_of_known_tables_with_lags_and_misplaced_records() -> None:
    cluster_map = ClusterMap(
        3,
        {TP: PartitionOwners(A, (B,)), ("dropped", 0): PartitionOwners(A)},
        nodes={B: {TP: 7, ("dropped", 0): 1}},
        misplaced={TP: 2},
    )
    partitions, nodes = describe_map(cluster_map, TABLES)
    assert partitions == [
        {
            "table": "items",
            "topic": "items-topic",
            "partition": 0,
            "active": A,
            "standbys": [B],
            "warming": [],
            "lags": {B: 7},
            "misplaced": 2,
        }
    ]
    assert nodes == [
        {"url": A, "active": [["items", 0]], "standby": [], "warming": [], "lags": {}},
        {"url": B, "active": [], "standby": [["items", 0]], "warming": [], "lags": {"items/0": 7}},
    ]


def test_local_replicas_name_their_table_even_once_it_left_the_catalog() -> None:
    gone: TopicPartition = ("gone-topic", 1)
    statuses = {
        TP: PartitionStatus(TP, "items", ReplicaState.STANDBY, 90, 100, 10, misplaced=3),
        gone: PartitionStatus(gone, "gone", ReplicaState.ACTIVE, 5, 5, 0),
    }
    local = describe_local(statuses, TABLES)
    assert [(r["table"], r["partition"], r["state"]) for r in local] == [
        ("gone", 1, "active"),
        ("items", 0, "standby"),
    ]
    assert local[1] == {
        "table": "items",
        "partition": 0,
        "state": "standby",
        "position": 90,
        "end": 100,
        "lag": 10,
        "misplaced": 3,
        "fault": None,
        "rebuilds": 0,
    }
