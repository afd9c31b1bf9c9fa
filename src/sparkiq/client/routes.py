"""The partition map as a client sees it (from `GET /v1/metadata`), and the order in which it
asks nodes."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkiq.core.errors import SparkiqError
from sparkiq.core.partitioner import Partitioner
from sparkiq.core.tables import Format, TableDef, TableKind, WindowLayout


@dataclass
class Routes:
    """What the client routes by: table definitions, each partition's active and standbys,
    the nodes."""

    tables: dict[str, TableDef] = field(default_factory=dict)
    active: dict[tuple[str, int], str] = field(default_factory=dict)
    standbys: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)
    fetched_at: float = 0.0


def parse_routes(meta: dict[str, Any], seeds: Sequence[str]) -> Routes:
    """The map of a `GET /v1/metadata` answer; `seeds`: the node URLs the client was given."""
    tables: dict[str, TableDef] = {}
    for t in meta.get("tables", []):
        try:
            tables[t["name"]] = TableDef(
                name=t["name"],
                topic=t["topic"],
                partitions=int(t["partitions"]),
                key_format=Format(t["key_format"]),
                value_format=Format.BYTES,  # values are rendered by the nodes
                kind=TableKind(t["kind"]),
                window_size_ms=t.get("window_size_ms"),
                key_schema="{}" if t["key_format"] == "avro" else None,
                # Nodes before per-table partitioners placed every key with murmur2.
                partitioner=Partitioner(t.get("partitioner", "murmur2")),
                window_layout=WindowLayout(t.get("window_layout", "sparkiq")),
            )
        except (KeyError, ValueError, SparkiqError):
            continue
    active = {
        (p["table"], int(p["partition"])): p["active"]
        for p in meta.get("partitions", [])
        if p.get("active")
    }
    standbys = {
        (p["table"], int(p["partition"])): [*p.get("standbys", []), *p.get("warming", [])]
        for p in meta.get("partitions", [])
    }
    nodes = sorted({n["url"] for n in meta.get("nodes", [])} | set(seeds))
    return Routes(
        tables=tables,
        active=active,
        standbys=standbys,
        nodes=nodes,
        fetched_at=time.monotonic(),
    )


def dedupe(order: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """Each URL once, where it first appears."""
    seen: set[str] = set()
    out: list[tuple[str, bool]] = []
    for url, is_standby in order:
        if url not in seen:
            seen.add(url)
            out.append((url, is_standby))
    return out
