"""A cluster map by reference, and the exchange that serves and fetches maps (`MapExchange`).

At tens of nodes and thousands of partitions, a whole map in every member's assignment
makes one rebalance write members x map bytes through Kafka (the leader's SyncGroup and the
group's record in ``__consumer_offsets``, 1 MiB by default). Past a budget, the group
leader instead gives every member a `MapReference` (tens of bytes) and serves the encoded
map itself; each member fetches it once, checks its digest and applies it. The exchange is
the leader's HTTP server and the members' HTTP client (`sparkiq.http.app.mapexchange`);
the group membership sees only this protocol.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

import orjson


@dataclass(frozen=True, slots=True)
class MapReference:
    """Where one generation's encoded map is: at `url` (the leader), `size` bytes whose
    SHA-256 is `digest` (hex)."""

    generation: int
    digest: str
    size: int
    url: str

    def to_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "generation": self.generation,
                "digest": self.digest,
                "size": self.size,
                "url": self.url,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> MapReference:
        raw: Any = orjson.loads(data)
        return cls(
            generation=int(raw["generation"]),
            digest=str(raw["digest"]),
            size=int(raw["size"]),
            url=str(raw["url"]),
        )

    def matches(self, data: bytes) -> bool:
        """Whether *data* is the map this reference names."""
        return len(data) == self.size and digest_of(data) == self.digest


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class MapExchange(Protocol):
    """Serves the maps this node published as group leader, and fetches others'."""

    @property
    def url(self) -> str:
        """Where the others fetch what this node publishes (its advertised URL)."""
        ...

    def publish(self, generation: int, digest: str, data: bytes) -> None:
        """Keep *data* (an encoded map) to serve under *digest*; the last few are kept."""
        ...

    async def fetch(self, reference: MapReference) -> bytes | None:
        """The encoded map *reference* names, from the node that published it; None when it
        could not be had this time (unreachable, not kept there, a wrong answer)."""
        ...
