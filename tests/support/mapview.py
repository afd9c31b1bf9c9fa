"""A `StaticView` whose `/v1/metadata` has a node's shape: what `sparkiq.Client` reads."""

from __future__ import annotations

from sparkiq.http.testing import StaticView


class MapView(StaticView):
    """A StaticView whose metadata lists its tables and each partition's active and standbys
    as a node's does."""

    def metadata(self) -> dict[str, object]:
        return {
            "node": self.url,
            "tables": [self.table_summary(t) for t in self.tables()],
            "partitions": [
                {
                    "table": t.name,
                    "partition": p,
                    "active": self.placement((t.topic, p)).active,
                    "standbys": list(self.placement((t.topic, p)).standbys),
                    "warming": [],
                }
                for t in self.tables()
                for p in range(t.partitions)
            ],
            "nodes": [],
        }
