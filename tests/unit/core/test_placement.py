"""Telling the partitioner from a sample: the one that places every record, else `any`."""

from __future__ import annotations

import random

import pytest

from sparkiq.core.partitioner import (
    Partitioner,
    PlaceFn,
    crc32_partition,
    fnv1a_partition,
    partition_for,
    placer,
)
from sparkiq.core.placement import NAMED, Detection, detect

N = 6


def _keys(count: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    keys = [f"customer-{i}".encode() for i in range(count // 2)]
    keys += [rng.randbytes(rng.randint(1, 40)) for _ in range(count - len(keys))]
    return keys


def _placed(place: PlaceFn, keys: list[bytes], n: int = N) -> list[tuple[int, bytes]]:
    return [(place(k, n), k) for k in keys]


def _named_place(partitioner: Partitioner) -> PlaceFn:
    place = placer(partitioner)
    assert place is not None
    return place


@pytest.mark.parametrize("partitioner", NAMED)
def test_each_named_partitioner_is_detected_from_keys_it_placed(
    partitioner: Partitioner,
) -> None:
    samples = _placed(_named_place(partitioner), _keys(600))

    found = detect(samples, N)

    assert found.chosen is partitioner
    assert found.sampled == 600
    assert found.in_place[partitioner] == 600
    # The others place only about 1 in N by chance: the sample tells them apart.
    assert all(found.in_place[p] < 300 for p in NAMED if p is not partitioner)


def test_a_custom_rule_is_any() -> None:
    samples = _placed(lambda k, n: len(k) % n, _keys(600))

    found = detect(samples, N)

    assert found.chosen is Partitioner.ANY
    assert all(found.in_place[p] < 600 for p in NAMED)
    assert set(found.in_place) == set(NAMED)


def test_one_misplaced_record_makes_it_any() -> None:
    samples = _placed(partition_for, _keys(600))
    partition, key = samples[100]
    samples[100] = ((partition + 1) % N, key)

    found = detect(samples, N)

    assert found.chosen is Partitioner.ANY
    assert found.in_place[Partitioner.MURMUR2] == 599


def test_an_empty_sample_assumes_murmur2_and_says_it_could_not_tell() -> None:
    found = detect([], N)

    assert found.chosen is Partitioner.MURMUR2
    assert found.sampled == 0
    text = found.evidence()
    assert "no keyed record was found" in text
    assert "could not be told" in text
    assert "murmur2" in text
    assert "assumed" in text


def test_with_one_partition_every_rule_fits_and_murmur2_is_preferred() -> None:
    found = detect([(0, k) for k in _keys(50)], 1)

    assert found.chosen is Partitioner.MURMUR2
    assert dict(found.in_place) == dict.fromkeys(NAMED, 50)


def test_crc32_is_preferred_to_fnv1a_when_both_fit_and_murmur2_does_not() -> None:
    # Keys on which crc32 and fnv1a agree and murmur2 does not: a tiny, ambiguous sample.
    agreeing = [
        k
        for k in _keys(400)
        if crc32_partition(k, N) == fnv1a_partition(k, N) != partition_for(k, N)
    ][:3]
    assert len(agreeing) == 3

    found = detect(_placed(crc32_partition, agreeing), N)

    assert found.chosen is Partitioner.CRC32
    assert found.in_place[Partitioner.FNV1A] == 3
    assert found.in_place[Partitioner.MURMUR2] == 0


def test_evidence_names_the_chosen_first_with_thousands_separators() -> None:
    found = Detection(
        Partitioner.CRC32,
        3000,
        {Partitioner.MURMUR2: 512, Partitioner.CRC32: 3000, Partitioner.FNV1A: 498},
    )

    assert found.evidence() == (
        "crc32: 3,000 of 3,000 sampled records in place; murmur2: 512 of 3,000; fnv1a: 498 of 3,000"
    )


def test_evidence_of_a_detection() -> None:
    keys = _keys(1500)
    found = detect(_placed(fnv1a_partition, keys), N)
    m, c = found.in_place[Partitioner.MURMUR2], found.in_place[Partitioner.CRC32]

    assert found.evidence() == (
        f"fnv1a: 1,500 of 1,500 sampled records in place; murmur2: {m:,} of 1,500; "
        f"crc32: {c:,} of 1,500"
    )


def test_evidence_of_any_says_no_named_partitioner_fits() -> None:
    samples = _placed(partition_for, _keys(1200))
    samples[0] = ((samples[0][0] + 1) % N, samples[0][1])
    found = detect(samples, N)
    c, f = found.in_place[Partitioner.CRC32], found.in_place[Partitioner.FNV1A]

    assert found.evidence() == (
        "any: no named partitioner places every sampled record; "
        f"murmur2: 1,199 of 1,200 sampled records in place; crc32: {c:,} of 1,200; "
        f"fnv1a: {f:,} of 1,200"
    )


def test_an_empty_key_is_in_place_anywhere_for_crc32_only() -> None:
    keys = _keys(300)
    # librdkafka's consistent_random put the empty key in a random partition.
    wrong_for_all = next(
        p
        for p in range(N)
        if p not in {crc32_partition(b"", N), partition_for(b"", N), fnv1a_partition(b"", N)}
    )
    crc_samples = [*_placed(crc32_partition, keys), (wrong_for_all, b"")]
    murmur_samples = [*_placed(partition_for, keys), (wrong_for_all, b"")]

    assert detect(crc_samples, N).chosen is Partitioner.CRC32
    assert detect(crc_samples, N).in_place[Partitioner.CRC32] == 301
    # murmur2 hashes an empty key like any other: misplaced, so not murmur2.
    found = detect(murmur_samples, N)
    assert found.chosen is Partitioner.ANY
    assert found.in_place[Partitioner.MURMUR2] == 300


def test_an_empty_key_where_murmur2_puts_it_keeps_murmur2() -> None:
    samples = [*_placed(partition_for, _keys(300)), (partition_for(b"", N), b"")]

    found = detect(samples, N)

    assert found.chosen is Partitioner.MURMUR2
    assert found.in_place[Partitioner.CRC32] < 301


def test_samples_may_be_any_iterable() -> None:
    keys = _keys(200)
    found = detect(((crc32_partition(k, N), k) for k in keys), N)

    assert found.chosen is Partitioner.CRC32
    assert found.sampled == 200


def test_a_partition_count_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="num_partitions"):
        detect([(0, b"k")], 0)
