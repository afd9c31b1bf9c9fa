"""The parts of a node's `/v1/metadata` made from its cluster map and its replicas' statuses.

`describe_map` lists every partition of a known table with its owners, their lags and its
misplaced records, and every node with its roles; `describe_local` lists this node's replicas.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sparkiq.core.tables import TableDef
from sparkiq.core.topology import ClusterMap, TopicPartition

if TYPE_CHECKING:
    from sparkiq.node.restore import PartitionStatus


def describe_map(
    cluster_map: ClusterMap, by_topic: Mapping[str, TableDef]
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The partitions and the nodes of `cluster_map`, for the tables in `by_topic` (by topic)."""
    partitions: list[dict[str, object]] = []
    per_node: dict[str, dict[str, list[list[object]]]] = {}
    for (topic, p), owners in sorted(cluster_map.owners.items()):
        table = by_topic.get(topic)
        if table is None:
            continue
        partitions.append(
            {
                "table": table.name,
                "topic": topic,
                "partition": p,
                "active": owners.active,
                "standbys": list(owners.standbys),
                "warming": list(owners.warming),
                "lags": {
                    url: lag
                    for url in (owners.active, *owners.standbys, *owners.warming)
                    if url and (lag := cluster_map.nodes.get(url, {}).get((topic, p))) is not None
                },
                "misplaced": cluster_map.misplaced.get((topic, p), 0),
            }
        )
        entry: list[object] = [table.name, p]
        if owners.active:
            per_node.setdefault(owners.active, {}).setdefault("active", []).append(entry)
        for url in owners.standbys:
            per_node.setdefault(url, {}).setdefault("standby", []).append(entry)
        for url in owners.warming:
            per_node.setdefault(url, {}).setdefault("warming", []).append(entry)
    nodes: list[dict[str, object]] = []
    for url in sorted(cluster_map.urls() | set(per_node)):
        roles = per_node.get(url, {})
        reported = cluster_map.nodes.get(url, {})
        nodes.append(
            {
                "url": url,
                "active": roles.get("active", []),
                "standby": roles.get("standby", []),
                "warming": roles.get("warming", []),
                "lags": {
                    f"{by_topic[t].name}/{p}": lag
                    for (t, p), lag in sorted(reported.items())
                    if t in by_topic
                },
            }
        )
    return partitions, nodes


def describe_local(
    statuses: Mapping[TopicPartition, PartitionStatus], by_topic: Mapping[str, TableDef]
) -> list[dict[str, object]]:
    """This node's replicas: state, position, lag, misplaced records and storage faults."""
    out: list[dict[str, object]] = []
    for tp, st in sorted(statuses.items()):
        table = by_topic.get(tp[0])
        out.append(
            {
                "table": table.name if table else st.table,
                "partition": tp[1],
                "state": st.state.value,
                "position": st.position,
                "end": st.end,
                "lag": st.lag,
                "misplaced": st.misplaced,
                "fault": st.fault,
                "rebuilds": st.rebuilds,
            }
        )
    return out
