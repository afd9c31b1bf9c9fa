"""Which local replicas the node lets stand in for a failed active (Node.placement).

No Kafka: the node is built but not started, and its restorer's published statuses are set
by hand, as the restorer thread would publish them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkiq.core.tables import TableDef
from sparkiq.core.topology import ClusterMap, PartitionOwners, TopicPartition
from sparkiq.node.node import Node, load_node_id
from sparkiq.node.restore import PartitionStatus, ReplicaState
from sparkiq.node.settings import NodeSettings

TP: TopicPartition = ("t", 0)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(NodeSettings(bootstrap_servers="127.0.0.1:1", state_dir=tmp_path))


def publish(node: Node, state: ReplicaState, position: int, end: int) -> None:
    """What the restorer publishes, then its change callback on the loop."""
    status = PartitionStatus(TP, "t", state, position, end, max(end - position, 0))
    node.restorer._statuses = {TP: status}
    node._track_replicas()


def test_a_new_standby_stands_in_only_once_its_lag_is_measured(node: Node) -> None:
    publish(node, ReplicaState.STANDBY, 0, 0)  # just assigned: lag 0 says nothing
    assert not node.placement(TP).local_lag_known
    publish(node, ReplicaState.STANDBY, 0, 0)
    assert not node.placement(TP).local_lag_known
    publish(node, ReplicaState.STANDBY, 300, 500)  # fetched: a real end
    placement = node.placement(TP)
    assert placement.local_lag_known
    assert placement.local_lag == 200


def test_a_store_from_disk_counts_once_it_has_moved(node: Node) -> None:
    publish(node, ReplicaState.STANDBY, 900, 900)  # checkpoint 900, end not read yet
    assert not node.placement(TP).local_lag_known
    publish(node, ReplicaState.STANDBY, 900, 1_200)
    assert node.placement(TP).local_lag_known


def test_a_store_measured_on_disk_counts_from_its_assignment(node: Node) -> None:
    node._set_tables({"t": TableDef("t", "t", 1)})
    standby = ClusterMap(1, {TP: PartitionOwners("http://other:1", (node.url,))})
    # Never measured: a new store stays unknown until it moves.
    node._on_assignment(standby)
    assert not node.placement(TP).local_lag_known
    node._on_assignment(ClusterMap(2))  # unassigned; the store stays on disk
    # The restorer measured it on disk (caught up), then it is assigned again.
    node.restorer._disk_lags = {TP: 0}
    node._on_assignment(standby)
    assert node.placement(TP).local_lag_known
    node.restorer.stop()


def test_only_a_promoted_standby_stands_in_while_restoring(node: Node) -> None:
    publish(node, ReplicaState.RESTORING, 0, 0)  # active from scratch
    publish(node, ReplicaState.RESTORING, 100, 500)
    assert not node.placement(TP).local_lag_known  # it would answer "absent" for most keys
    node._track_replicas()
    node.restorer._statuses = {}
    node._track_replicas()  # unassigned: forgotten
    publish(node, ReplicaState.STANDBY, 0, 0)
    publish(node, ReplicaState.STANDBY, 480, 500)
    publish(node, ReplicaState.RESTORING, 490, 500)  # the standby was promoted
    placement = node.placement(TP)
    assert placement.local_lag_known
    assert not placement.is_local_active


def test_the_node_id_is_kept_in_the_state_dir(tmp_path: Path) -> None:
    first = load_node_id(tmp_path / "state")
    assert len(first) == 32
    assert load_node_id(tmp_path / "state") == first  # a restart is the same node
    assert load_node_id(tmp_path / "other") != first


def test_a_node_whose_url_is_refused_holds_nothing_and_says_why(node: Node) -> None:
    node._set_tables({"t": TableDef("t", "t", 1)})
    node._joined = True
    refused = ClusterMap(3, {TP: PartitionOwners(node.url)}, refused={node.node_id: node.url})
    node._on_assignment(refused)
    assert node.restorer._replicas == {}  # nothing assigned, although the map names its URL
    assert not node.is_ready()
    reason = node.unready_reason()
    assert reason is not None
    assert "advertises the same URL" in reason
    assert node.metadata()["refused"] == [{"node_id": node.node_id, "url": node.url}]
    node._on_assignment(ClusterMap(4, {TP: PartitionOwners(node.url)}))
    assert node._refused_url is None


def test_a_node_says_when_its_brokers_are_unreachable_and_stays_ready(node: Node) -> None:
    node._set_tables({"t": TableDef("t", "t", 1)})
    node._joined = True
    node._on_assignment(ClusterMap(2, {TP: PartitionOwners(node.url)}))
    publish(node, ReplicaState.ACTIVE, 10, 10)
    assert node.metadata()["kafka"] == node.kafka_contact() == {"reachable": True}
    node.brokers.lost("1/1 brokers are down")
    assert node.is_ready()  # it holds caught-up state: it stays in rotation
    kafka = node.kafka_contact()
    assert kafka["reachable"] is False
    assert kafka["reason"] == "1/1 brokers are down"
    assert node.metadata()["kafka"] == kafka
    # A node not ready yet adds the outage to its reason.
    publish(node, ReplicaState.RESTORING, 5, 10)
    reason = node.unready_reason()
    assert reason is not None
    assert reason.startswith("the node is still restoring its active partitions; ")
    assert "the Kafka brokers at 127.0.0.1:1 are unreachable since" in reason
    node.brokers.reached()
    assert node.unready_reason() == "the node is still restoring its active partitions"


async def test_a_map_with_many_new_stores_opens_them_off_the_loop(node: Node) -> None:
    """100 new stores (~8 ms each): the map holds at once, the stores open in a thread
    while the loop goes on, and a map that arrives meanwhile is applied after them."""
    import asyncio

    table = TableDef("t", "t", 100)
    node._set_tables({"t": table})
    everything = ClusterMap(3, {("t", p): PartitionOwners(node.url) for p in range(100)})
    node._on_assignment(everything)
    assert node.cluster_map is everything
    task = node._roles_task
    assert task is not None
    assert not task.done()  # in its thread: the loop is free meanwhile
    ticks = 0
    while not task.done():
        ticks += 1
        await asyncio.sleep(0.001)
        if ticks == 1:  # a newer map arrives while the stores open: two partitions left
            two = {("t", p): PartitionOwners(node.url) for p in range(2)}
            node._on_assignment(ClusterMap(4, two))
    assert ticks > 1
    assert set(node.restorer.statuses()) == {("t", 0), ("t", 1)}
    node.restorer.stop()
