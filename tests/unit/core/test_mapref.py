"""A map by reference: its bytes, and the check of what was fetched for it."""

from __future__ import annotations

import hashlib

from sparkiq.core.mapref import MapReference, digest_of


def test_a_reference_round_trips_and_names_only_its_map() -> None:
    data = b"an encoded map"
    ref = MapReference(7, digest_of(data), len(data), "http://10.0.0.5:8100")
    assert MapReference.from_bytes(ref.to_bytes()) == ref
    assert len(ref.to_bytes()) < 160
    assert ref.digest == hashlib.sha256(data).hexdigest()
    assert ref.matches(data)
    assert not ref.matches(data + b" ")
    assert not ref.matches(b"an encoded mal")
