"""Partitions of many keys at once equal the per-key functions, for every key."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkiq.core.bulk_partitions import partitions_of
from sparkiq.core.partitioner import Partitioner, placer

NAMED = [Partitioner.MURMUR2, Partitioner.CRC32, Partitioner.FNV1A]


def expected(partitioner: Partitioner, keys: list[bytes], n: int) -> list[int]:
    place = placer(partitioner)
    assert place is not None
    return [place(k, n) for k in keys]


@pytest.mark.parametrize("partitioner", NAMED)
@pytest.mark.parametrize("n", [1, 6, 7, 64])
def test_a_batch_of_one_length_and_of_many(partitioner: Partitioner, n: int) -> None:
    rng = random.Random(n)
    same = [b"k%09d" % rng.randrange(10**9) for _ in range(5000)]  # one length: numpy
    mixed = [rng.randbytes(rng.randint(0, 40)) for _ in range(5000)]  # 41 lengths
    long = [rng.randbytes(rng.randint(1000, 1100)) for _ in range(200)]  # few per length
    for keys in (same, mixed, long, same + mixed + long, [], [b""], [b""] * 100):
        assert partitions_of(partitioner, keys, n).tolist() == expected(partitioner, keys, n)


@settings(max_examples=200)
@given(st.lists(st.binary(max_size=24), max_size=300), st.integers(1, 100))
def test_murmur2_in_bulk_equals_key_by_key(keys: list[bytes], n: int) -> None:
    got = partitions_of(Partitioner.MURMUR2, keys, n)
    assert got.tolist() == expected(Partitioner.MURMUR2, keys, n)


def test_any_places_nothing() -> None:
    with pytest.raises(ValueError, match="any"):
        partitions_of(Partitioner.ANY, [b"a"], 3)
