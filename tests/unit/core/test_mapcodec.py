"""The compact map encoding: exact round trips, damaged bytes refused, a few bytes per
partition whatever the URLs' length."""

from __future__ import annotations

import random
import zlib

import pytest

from sparkiq.core.mapcodec import MapEncodingError, decode_map, encode_map
from sparkiq.core.topology import ClusterMap, PartitionOwners, TopicPartition


def k8s_url(i: int) -> str:
    return f"http://sparkiq-serving-{i}.sparkiq-serving.production.svc.cluster.local:8100"


def random_map(seed: int, nodes: int, topics: dict[str, int]) -> ClusterMap:
    rng = random.Random(seed)
    urls = [k8s_url(i) for i in range(nodes)]
    owners: dict[TopicPartition, PartitionOwners] = {}
    for topic, count in topics.items():
        for p in range(count):
            chosen = rng.sample(urls, min(3, nodes))
            owners[(topic, p)] = PartitionOwners(
                active=None if rng.random() < 0.05 else chosen[0],
                standbys=tuple(chosen[1:2]) if rng.random() < 0.8 else (),
                warming=tuple(chosen[2:3]) if rng.random() < 0.1 else (),
            )
    lags = {
        url: {tp: rng.randint(0, 10**9) for tp in rng.sample(sorted(owners), 5)} for url in urls
    }
    return ClusterMap(
        generation=rng.randint(-1, 10**6),
        owners=owners,
        nodes=lags,
        misplaced={tp: rng.randint(1, 99) for tp in rng.sample(sorted(owners), 3)},
        refused={"a1b2": urls[0]},
    )


@pytest.mark.parametrize("seed", range(20))
def test_a_map_round_trips_exactly(seed: int) -> None:
    original = random_map(seed, nodes=1 + seed % 7, topics={"orders": 12, "users:v2": 5, "x": 1})
    decoded = decode_map(encode_map(original))
    assert decoded == original
    # Standby order is part of the map (the order a client tries them in).
    for tp, owners in original.owners.items():
        assert decoded.owners[tp].standbys == owners.standbys


def test_partitions_that_are_not_a_whole_range_round_trip() -> None:
    original = ClusterMap(
        generation=3,
        owners={("t", 7): PartitionOwners("http://a"), ("t", 2): PartitionOwners(None)},
        nodes={"http://idle": {}},  # a node with nothing to report stays listed
    )
    assert decode_map(encode_map(original)) == original


def test_an_empty_map_round_trips() -> None:
    assert decode_map(encode_map(ClusterMap())) == ClusterMap()


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{}",
        ClusterMap(generation=2).to_bytes(),  # the plain JSON of protocol 1
        zlib.compress(b'{"v": 3}'),
        zlib.compress(b'{"v": 2, "g": 1, "topics": [{"t": "t", "n": 2, "a": [0]}], "urls": []}'),
    ],
)
def test_bytes_that_are_no_map_of_this_encoding_are_refused(data: bytes) -> None:
    with pytest.raises(MapEncodingError):
        decode_map(data)


def test_a_partition_costs_a_few_bytes_however_long_the_urls() -> None:
    """3,000 partitions of 100 Kubernetes-named nodes, one standby each: the plain JSON of
    protocol 1 names two URLs per partition (~250 bytes); the compact one a few bytes."""
    topics = {f"app.table{t}-changelog": 300 for t in range(10)}
    urls = [k8s_url(i) for i in range(100)]
    owners = {
        (topic, p): PartitionOwners(urls[(i * 7) % 100], (urls[(i * 7 + 1) % 100],))
        for i, (topic, p) in enumerate((t, p) for t, n in topics.items() for p in range(n))
    }
    cluster_map = ClusterMap(generation=5, owners=owners, nodes={u: {} for u in urls})
    compact, plain = len(encode_map(cluster_map)), len(cluster_map.to_bytes())
    print(f"3,000 partitions, 100 nodes: {compact} bytes encoded, {plain} as plain JSON")
    assert compact < 3 * 3_000
    assert plain > 50 * compact
