"""What the leader puts in each member's assignment: the map inline, or a reference to it.

Three forms of assignment user data, told apart by their first bytes:

- ``{...}``: the whole map in plain JSON (`ClusterMap.to_bytes`, protocol 1), written while a
  member of protocol 1 is in the group (a rolling upgrade) and read from a leader of it;
- ``SQM\\x02I`` + the compact map (`sparkiq.core.mapcodec`): inline, while members x map
  bytes stay within `INLINE_BUDGET_BYTES` (small clusters: nothing to fetch);
- ``SQM\\x02R`` + a `MapReference`: past it, or never when the leader has no exchange.

So one rebalance writes through Kafka at most `INLINE_BUDGET_BYTES` of maps, or members x
~150 bytes of references; each member then fetches the map once from the leader.
"""

from __future__ import annotations

from sparkiq.core.mapcodec import MapEncodingError, decode_map
from sparkiq.core.mapref import MapReference
from sparkiq.core.topology import ClusterMap

# Members x encoded map bytes up to which every assignment carries the map itself. Kafka
# keeps a group's assignments in one record of __consumer_offsets, limited to 1 MiB by
# default (message.max.bytes), beside the members' subscriptions; a quarter of it leaves
# room for those. A 300-partition map of 20 nodes is ~3 KB encoded: inline.
INLINE_BUDGET_BYTES = 256 * 1024

_MAGIC = b"SQM\x02"
_INLINE = _MAGIC + b"I"
_REFERENCE = _MAGIC + b"R"


def inline(encoded_map: bytes) -> bytes:
    """Assignment user data carrying the (compact) encoded map itself."""
    return _INLINE + encoded_map


def by_reference(reference: MapReference) -> bytes:
    """Assignment user data carrying only where to fetch the map."""
    return _REFERENCE + reference.to_bytes()


def fits_inline(members: int, encoded_bytes: int, budget: int = INLINE_BUDGET_BYTES) -> bool:
    """Whether every member's assignment may carry the map: what the rebalance writes stays
    within *budget*."""
    return members * encoded_bytes <= budget


def read(user_data: bytes) -> ClusterMap | MapReference:
    """The map, or the reference to it, in one assignment's user data.

    ValueError (MapEncodingError) for data of none of the three forms.
    """
    if user_data.startswith(_INLINE):
        return decode_map(user_data[len(_INLINE) :])
    if user_data.startswith(_REFERENCE):
        try:
            return MapReference.from_bytes(user_data[len(_REFERENCE) :])
        except (ValueError, KeyError, TypeError) as exc:
            raise MapEncodingError(f"not a map reference: {exc!r}") from exc
    if user_data.startswith(b"{"):
        try:
            return ClusterMap.from_bytes(user_data)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise MapEncodingError(f"not a cluster map of protocol 1: {exc!r}") from exc
    raise MapEncodingError(f"assignment user data of no known form ({user_data[:8]!r}...)")
