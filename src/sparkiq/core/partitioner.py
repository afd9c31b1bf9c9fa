"""Kafka producers' partitioners, bit for bit: which partition a record key lands in.

sparkiq must agree with the producer that wrote a topic exactly: a serving node that
computed another partition would look for the key in the wrong store. Producers do not all
place keys alike, so a table names its `Partitioner`:

- ``murmur2``: Kafka's Java producer, Kafka Streams, Spark and librdkafka's ``murmur2`` /
  ``murmur2_random`` choose ``toPositive(murmur2(key_bytes)) % num_partitions``, where
  ``murmur2`` is MurmurHash2 (32-bit, little-endian blocks) with Kafka's seed
  ``0x9747b28c`` and ``toPositive`` clears the sign bit of Java's signed result. The
  golden vectors of Kafka's ``UtilsTest.testMurmur2`` pin it.
- ``crc32``: librdkafka's ``consistent`` and ``consistent_random`` (the latter is
  librdkafka's default, so confluent-kafka's and most C and Python producers') choose
  ``crc32(key) % num_partitions`` with the unsigned IEEE CRC-32 that zlib computes.
  ``consistent_random`` places an *empty* key at random; the rule holds for every other key.
- ``fnv1a``: librdkafka's ``fnv1a`` / ``fnv1a_random`` and Go's Sarama (its default hash
  partitioner) choose ``|fnv1a(key)| % num_partitions``: the 32-bit FNV-1a hash read as a
  signed integer, made positive by negation (Sarama's rule, which librdkafka copies). The
  hash ``0x80000000`` (INT_MIN) stays ``0x80000000`` there, read as unsigned: 2**31.
- ``any``: custom or unknown placement; nothing can compute the partition of a key.

Null keys are placed at random by every producer (librdkafka in sticky batches, whichever
partitioner is set); they name no record of a changelog, so none is ever placed here.
`tests/unit/core/test_partitioner.py` pins every rule against the partitions librdkafka chooses.

``partition_for`` (murmur2) runs on every HTTP lookup of most tables, so it uses the
C-backed (Rust) ``murmurhash2`` package when its wheel is installed (~70 ns per call) and
falls back to the pure-Python implementation here (same results, ~1.5 µs for 10-40 byte
keys) when it is not. ``fnv1a_partition`` likewise uses the C ``fnv-hash-fast`` package
and falls back to a pure-Python loop; ``crc32_partition`` is zlib's C CRC-32.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from enum import StrEnum
from functools import lru_cache

__all__ = [
    "IMPLEMENTATION",
    "Partitioner",
    "PlaceFn",
    "crc32_partition",
    "fnv1a",
    "fnv1a_partition",
    "fnv1a_py",
    "fnv1a_unsigned",
    "murmur2",
    "murmur2_py",
    "murmur2_unsigned",
    "partition_for",
    "placer",
    "to_positive",
]


class Partitioner(StrEnum):
    """The rule a topic's producers placed keyed records in partitions by."""

    MURMUR2 = "murmur2"
    """Kafka's default: Java clients, Kafka Streams, Spark, librdkafka murmur2(_random)."""

    CRC32 = "crc32"
    """librdkafka ``consistent`` / ``consistent_random`` (its default) for keyed records."""

    FNV1A = "fnv1a"
    """librdkafka ``fnv1a`` / ``fnv1a_random`` and Sarama's (Go) default hash partitioner."""

    ANY = "any"
    """Custom or unknown placement: a key may be in any partition."""


# One signature for every rule, so a table's rule is picked once and then called per lookup.
PlaceFn = Callable[[bytes, int], int]

SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``: MIN_VALUE maps to 0)."""
    return n & 0x7FFFFFFF


@lru_cache(maxsize=256)
def _blocks_reader(n_blocks: int) -> Callable[[bytes], tuple[int, ...]]:
    # One precompiled struct per block count: unpacking all 4-byte blocks in one C call
    # is several times faster than slicing the key block by block in Python.
    return struct.Struct(f"<{n_blocks}I").unpack_from


def _murmur2_unsigned_py(data: bytes, seed: int = SEED) -> int:
    length = len(data)
    m = _M
    h = (seed ^ length) & _MASK32
    n_blocks = length >> 2
    if n_blocks:
        for k in _blocks_reader(n_blocks)(data):
            k = (k * m) & _MASK32
            k ^= k >> 24
            k = (k * m) & _MASK32
            h = ((h * m) & _MASK32) ^ k
    tail = length & 3
    if tail:
        i = length - tail
        if tail == 3:
            h ^= data[i + 2] << 16
        if tail >= 2:
            h ^= data[i + 1] << 8
        h ^= data[i]
        h = (h * m) & _MASK32
    h ^= h >> 13
    h = (h * m) & _MASK32
    h ^= h >> 15
    return h


def _signed(h: int) -> int:
    return h - 0x100000000 if h & 0x80000000 else h


def murmur2_py(data: bytes) -> int:
    """Pure-Python ``murmur2``; the reference the C-backed path is tested against."""
    return _signed(_murmur2_unsigned_py(bytes(data)))


# (data, seed) -> unsigned 32-bit MurmurHash2; called directly on the hot path, no wrapper.
_murmur2_unsigned: Callable[[bytes, int], int]
try:
    from murmurhash2 import murmurhash2 as _murmur2_unsigned
except ImportError:  # pragma: no cover - depends on the installed wheels
    _murmur2_unsigned = _murmur2_unsigned_py
    IMPLEMENTATION = "python"
else:
    IMPLEMENTATION = "murmurhash2"

# (data: bytes, seed) -> unsigned MurmurHash2: the C function itself, for callers that
# hash many keys through `map` (a Python wrapper would cost a frame per key).
murmur2_unsigned = _murmur2_unsigned


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2(byte[])``: the signed 32-bit result Java returns."""
    if type(data) is not bytes:
        # The C path accepts only bytes; bytearray/memoryview keys are copied once.
        data = bytes(data)
    return _signed(_murmur2_unsigned(data, SEED))


def partition_for(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner gives a record with key *key*.

    The sign bit is cleared on the unsigned hash directly, which equals
    ``toPositive(murmur2(key))`` without the round trip through a signed value.
    *num_partitions* must be >= 1 (table definitions guarantee it; not re-checked here
    because this runs on every lookup).
    """
    if type(key) is not bytes:
        key = bytes(key)
    return (_murmur2_unsigned(key, SEED) & 0x7FFFFFFF) % num_partitions


# ---- crc32 (librdkafka consistent, consistent_random) --------------------------------


def crc32_partition(key: bytes, num_partitions: int) -> int:
    """The partition librdkafka's ``consistent`` partitioner gives a record with key *key*.

    zlib's CRC-32 is librdkafka's ``rd_crc32`` (IEEE, reflected) and returns it unsigned,
    as librdkafka's ``uint32_t % partition_cnt`` reads it. *num_partitions* must be >= 1.
    """
    return zlib.crc32(key) % num_partitions


# ---- fnv1a (librdkafka fnv1a, fnv1a_random; Sarama) ----------------------------------

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def _fnv1a_32_py(data: bytes) -> int:
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK32
    return h


def _abs_signed(h: int) -> int:
    # Negating the signed value, on the unsigned bits; INT_MIN negates to itself (2**31).
    return 0x100000000 - h if h & 0x80000000 else h


def fnv1a_py(data: bytes) -> int:
    """Pure-Python ``fnv1a``; the reference the C-backed path is tested against."""
    return _abs_signed(_fnv1a_32_py(bytes(data)))


# data -> unsigned 32-bit FNV-1a; called directly on the hot path, no wrapper.
_fnv1a_32: Callable[[bytes], int]
try:
    from fnv_hash_fast import fnv1a_32 as _fnv1a_32
except ImportError:  # pragma: no cover - depends on the installed wheels
    _fnv1a_32 = _fnv1a_32_py

# (data: bytes) -> unsigned 32-bit FNV-1a, before librdkafka's absolute value; as above.
fnv1a_unsigned = _fnv1a_32


def fnv1a(data: bytes) -> int:
    """librdkafka's ``rd_fnv1a``: the absolute value of the signed 32-bit FNV-1a hash.

    Non-negative, at most 2**31 (the hash 0x80000000 is its own negation).
    """
    if type(data) is not bytes:
        # The C path accepts only bytes; bytearray/memoryview keys are copied once.
        data = bytes(data)
    return _abs_signed(_fnv1a_32(data))


def fnv1a_partition(key: bytes, num_partitions: int) -> int:
    """The partition librdkafka's ``fnv1a`` partitioner (and Sarama's) gives key *key*.

    *num_partitions* must be >= 1 (not re-checked: this runs on every lookup).
    """
    if type(key) is not bytes:
        key = bytes(key)
    h = _fnv1a_32(key)
    # _abs_signed inlined: on a short key the call would cost about as much as the hash.
    if h & 0x80000000:
        h = 0x100000000 - h
    return h % num_partitions


# ---- choosing one --------------------------------------------------------------------

_PLACERS: dict[Partitioner, PlaceFn] = {
    Partitioner.MURMUR2: partition_for,
    Partitioner.CRC32: crc32_partition,
    Partitioner.FNV1A: fnv1a_partition,
}


def placer(partitioner: Partitioner) -> PlaceFn | None:
    """The function that places keys as *partitioner* does; None for `Partitioner.ANY`."""
    return _PLACERS.get(partitioner)
