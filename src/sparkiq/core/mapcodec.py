"""The compact encoding of a `ClusterMap`: each URL once, owners as indexes, compressed.

`ClusterMap.to_bytes` (protocol 1) spells out every partition as ``"topic:p"`` with its
owners' full URLs; at 3,000 partitions and Kubernetes-length URLs that is ~70 KB per map.
Here (protocol 2) the map is a URL table and a topic table, and per topic the partitions in
order with their owners as indexes into the URL table (``-1``: no active); the lags the
nodes reported and the misplaced counts are flat runs of ``topic index, partition, value``.
The JSON of that is zlib-compressed (the standard library's; the runs of small integers
compress well), so a map costs a few bytes per partition, whatever the URLs' length.

The encoding is exact: `decode_map(encode_map(m)) == m`.
"""

from __future__ import annotations

import zlib
from typing import Any

import orjson

from sparkiq.core.topology import ClusterMap, PartitionOwners, TopicPartition
from sparkiq.core.tpruns import Numbering, from_value_run, value_run

MAP_ENCODING_VERSION = 2

# zlib's level 6 (its default) took ~1 ms for a 3,000-partition map and came within 3% of
# level 9.
_LEVEL = 6


class MapEncodingError(ValueError):
    """Bytes that are not a map in this encoding (damaged, or of another version)."""


def encode_map(cluster_map: ClusterMap) -> bytes:
    """*cluster_map* in the compact encoding (zlib-compressed JSON, see the module doc)."""
    urls = Numbering()
    topics = Numbering()
    by_topic: dict[str, list[tuple[int, PartitionOwners]]] = {}
    for (topic, p), owners in sorted(cluster_map.owners.items()):
        by_topic.setdefault(topic, []).append((p, owners))
    out_topics: list[dict[str, Any]] = []
    for topic, rows in by_topic.items():
        topics.index(topic)
        parts = [p for p, _ in rows]
        entry: dict[str, Any] = {"t": topic}
        if parts == list(range(len(parts))):
            entry["n"] = len(parts)
        else:
            entry["p"] = parts
        entry["a"] = [-1 if o.active is None else urls.index(o.active) for _, o in rows]
        # Standbys and warm-ups are listed only where some partition has one.
        if any(o.standbys for _, o in rows):
            entry["s"] = [[urls.index(u) for u in o.standbys] for _, o in rows]
        if any(o.warming for _, o in rows):
            entry["w"] = [[urls.index(u) for u in o.warming] for _, o in rows]
        out_topics.append(entry)
    nodes = [
        [urls.index(url), value_run(topics, lags.items())]
        for url, lags in cluster_map.nodes.items()
    ]
    doc = {
        "v": MAP_ENCODING_VERSION,
        "g": cluster_map.generation,
        "topics": out_topics,
        "nodes": nodes,
        "misplaced": value_run(topics, cluster_map.misplaced.items()),
        "refused": dict(cluster_map.refused),
        # Last: every table above may have added to them.
        "urls": urls.items,
        "topic_names": topics.items,
    }
    return zlib.compress(orjson.dumps(doc), _LEVEL)


def decode_map(data: bytes) -> ClusterMap:
    """The map `encode_map` encoded; MapEncodingError for anything else."""
    try:
        raw: Any = orjson.loads(zlib.decompress(data))
        if raw.get("v") != MAP_ENCODING_VERSION:
            raise MapEncodingError(f"map encoding version {raw.get('v')!r}, not 2")
        urls: list[str] = [str(u) for u in raw["urls"]]
        names: list[str] = [str(t) for t in raw["topic_names"]]
        owners: dict[TopicPartition, PartitionOwners] = {}
        for entry in raw["topics"]:
            topic = str(entry["t"])
            parts = list(range(int(entry["n"]))) if "n" in entry else [int(p) for p in entry["p"]]
            actives = entry["a"]
            standbys = entry.get("s")
            warming = entry.get("w")
            for i, p in enumerate(parts):
                a = int(actives[i])
                owners[(topic, p)] = PartitionOwners(
                    active=None if a < 0 else urls[a],
                    standbys=tuple(urls[j] for j in standbys[i]) if standbys else (),
                    warming=tuple(urls[j] for j in warming[i]) if warming else (),
                )
        return ClusterMap(
            generation=int(raw["g"]),
            owners=owners,
            nodes={urls[int(u)]: from_value_run(names, run) for u, run in raw["nodes"]},
            misplaced=from_value_run(names, raw["misplaced"]),
            refused={str(k): str(v) for k, v in raw["refused"].items()},
        )
    except MapEncodingError:
        raise
    except (zlib.error, orjson.JSONDecodeError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise MapEncodingError(f"not a cluster map in encoding 2: {exc!r}") from exc
