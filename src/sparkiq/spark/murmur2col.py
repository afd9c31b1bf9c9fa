"""Kafka's murmur2 partition of a binary column, as a Spark SQL expression (no Python worker).

Spark's built-in Kafka sink places a keyed record by murmur2 of its whole key. A windowed
changelog's key is the key bytes followed by an 8-byte window start, and all windows of a key
must land in the partition of the key bytes alone, so with the built-in sink the
``partition`` column is computed here: `murmur2_partition(name, n)` is
``toPositive(murmur2(key_part)) % n`` (`sparkiq.core.partitioner.partition_for`) in Spark SQL
functions only, so the JVM computes it.

Spark SQL has no unsigned 32-bit integers and, with ANSI mode (Spark 4's default), fails on
a long overflow, so every 32-bit product is computed in longs from 16-bit halves and masked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["murmur2_partition", "murmur2_sql"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def _mul(x: str) -> str:
    """``(x * M) mod 2**32`` for a long *x* in [0, 2**32), without overflowing a long."""
    return f"((({x}) & 65535) * {_M} + (((shiftright(({x}), 16) * {_M}) & 65535) << 16)) & {_MASK}"


def _let(value: str, name: str, body: str) -> str:
    """*body* with *name* bound to *value* (evaluated once): a one-element ``transform``."""
    return f"transform(array({value}), {name} -> {body})[0]"


def murmur2_sql(column: str) -> str:
    """The SQL expression of Kafka's signed murmur2 hash's low 31 bits of *column* (binary).

    The result is ``murmur2(bytes) & 0x7fffffff`` (Kafka's ``toPositive``) as a long.
    """
    hx = f"hex({column})"
    n = f"length({column})"

    def byte(index: str) -> str:
        return f"cast(conv(substr({hx}, ({index}) * 2 + 1, 2), 16, 10) as bigint)"

    def block(i: str) -> str:
        return (
            f"({byte(f'{i} * 4')} | ({byte(f'{i} * 4 + 1')} << 8) | "
            f"({byte(f'{i} * 4 + 2')} << 16) | ({byte(f'{i} * 4 + 3')} << 24))"
        )

    # One 4-byte block: k *= m; k ^= k >>> 24; k *= m; h *= m; h ^= k.
    mixed_k = _let(_mul(block("i")), "k1", _let("k1 ^ shiftright(k1, 24)", "k2", _mul("k2")))
    step = f"(h, i) -> {_mul('h')} ^ {mixed_k}"
    blocks = f"cast(floor({n} / 4) as int)"
    indices = f"if({blocks} > 0, sequence(0, {blocks} - 1), cast(array() as array<int>))"
    start = f"({_SEED} ^ {n}) & {_MASK}"
    body = f"aggregate({indices}, cast({start} as bigint), {step})"
    # The tail (length % 4 bytes): h ^= ...; h *= m (only when there is a tail).
    tail_base = f"({n} - {n} % 4)"
    tail = (
        f"(if({n} % 4 >= 3, {byte(f'{tail_base} + 2')} << 16, 0) | "
        f"if({n} % 4 >= 2, {byte(f'{tail_base} + 1')} << 8, 0) | "
        f"if({n} % 4 >= 1, {byte(tail_base)}, 0))"
    )
    with_tail = _let(body, "h0", f"if({n} % 4 > 0, {_mul(f'h0 ^ {tail}')}, h0)")
    # h ^= h >>> 13; h *= m; h ^= h >>> 15
    final = _let(
        with_tail,
        "f1",
        _let(_mul("f1 ^ shiftright(f1, 13)"), "f2", "f2 ^ shiftright(f2, 15)"),
    )
    return f"({final}) & 2147483647"


def murmur2_partition(column: str, partitions: int) -> Column:
    """The partition Kafka's murmur2 partitioner gives the binary column named *column*."""
    from pyspark.sql import functions as F

    return F.expr(f"cast(({murmur2_sql(f'`{column}`')}) % {int(partitions)} as int)")
