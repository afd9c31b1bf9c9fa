"""The partitions of many keys at once: how restore checks every record's placement.

Restore runs at the speed of the Kafka consumer (../shared/BASELINES.md), and a Python call
per record to check its partition would cost it a good share of that: the murmur2 binding
alone takes ~150 ns a call. Here the keys of a batch are hashed together. The C hash
functions run through `map` (no Python frame per key) and the modulo over a numpy array;
murmur2 of many keys of one length (a changelog's keys mostly share one length, or a few)
runs in numpy itself, one array operation per 4-byte block over all of them.

Every result equals `sparkiq.core.partitioner`'s function for that key
(tests/unit/core/test_bulk_partitions.py). Keys must be `bytes`.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from itertools import repeat

import numpy as np
import numpy.typing as npt

from sparkiq.core.partitioner import SEED, Partitioner, fnv1a_unsigned, murmur2_unsigned

__all__ = ["partitions_of"]

Partitions = npt.NDArray[np.int64]

_M = np.uint32(0x5BD1E995)


def partitions_of(
    partitioner: Partitioner, keys: Sequence[bytes], num_partitions: int
) -> Partitions:
    """The partition `partitioner` gives each of `keys`, in order.

    `Partitioner.ANY` has none: ValueError. `num_partitions` must be >= 1.
    """
    count = len(keys)
    if partitioner is Partitioner.MURMUR2:
        return _murmur2_partitions(keys, num_partitions)
    if partitioner is Partitioner.CRC32:
        return np.fromiter(map(zlib.crc32, keys), np.int64, count) % num_partitions
    if partitioner is Partitioner.FNV1A:
        h = np.fromiter(map(fnv1a_unsigned, keys), np.int64, count)
        # librdkafka's absolute value of the signed hash (0x80000000 stays itself).
        h = np.where(h & 0x80000000, 0x100000000 - h, h)
        return h % num_partitions
    raise ValueError(f"partitioner {partitioner.value!r} places no key")


def _murmur2_partitions(keys: Sequence[bytes], num_partitions: int) -> Partitions:
    count = len(keys)
    if not count:
        return np.empty(0, dtype=np.int64)
    if count < _NUMPY_FROM:
        # No group of keys could be worth numpy: grouping them by length would cost more
        # than hashing them (~30 us for one key; a caught-up restorer checks a batch of a
        # record or a few at a time).
        return _one_by_one(keys, num_partitions)
    lengths = np.fromiter(map(len, keys), np.int64, count)
    first = int(lengths[0])
    if _worth_numpy(count, first) and bool((lengths == first).all()):
        return _same_length(keys, first, num_partitions)
    out = _one_by_one(keys, num_partitions)
    # Long runs of one length are worth numpy; the rest stays as hashed one by one.
    order = np.argsort(lengths, kind="stable")
    starts = np.flatnonzero(np.diff(lengths[order])) + 1
    for group in np.split(order, starts):
        length = int(lengths[group[0]])
        if _worth_numpy(len(group), length):
            out[group] = _same_length([keys[i] for i in group], length, num_partitions)
    return out


_NUMPY_FROM = 200  # keys: fewer are never `_worth_numpy`


def _worth_numpy(count: int, length: int) -> bool:
    # A numpy operation costs ~1-2 us whatever its size, ~8 of them per 4-byte block and
    # ~20 more; a key hashed on its own ~150 ns. Measured break-even, with a margin.
    return count >= _NUMPY_FROM + 60 * (length >> 2)


def _one_by_one(keys: Sequence[bytes], num_partitions: int) -> Partitions:
    h = np.fromiter(map(murmur2_unsigned, keys, repeat(SEED)), np.int64, len(keys))
    return (h & 0x7FFFFFFF) % num_partitions


def _same_length(keys: Sequence[bytes], length: int, num_partitions: int) -> Partitions:
    """murmur2 partitions of keys that are all `length` bytes long, in numpy."""
    count = len(keys)
    raw = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(count, length)
    h = np.full(count, (SEED ^ length) & 0xFFFFFFFF, dtype=np.uint32)
    blocks = length >> 2
    if blocks:
        words = np.ascontiguousarray(raw[:, : 4 * blocks]).view("<u4")
        for j in range(blocks):
            k = words[:, j] * _M
            k ^= k >> 24
            k *= _M
            h *= _M
            h ^= k
    tail, i = length & 3, 4 * blocks
    if tail == 3:
        h ^= raw[:, i + 2].astype(np.uint32) << 16
    if tail >= 2:
        h ^= raw[:, i + 1].astype(np.uint32) << 8
    if tail:
        h ^= raw[:, i].astype(np.uint32)
        h *= _M
    h ^= h >> 13
    h *= _M
    h ^= h >> 15
    return (h & 0x7FFFFFFF).astype(np.int64) % num_partitions
