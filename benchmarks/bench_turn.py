"""The CPU of one restorer turn against the number of replicas a node holds.

A caught-up restorer runs one turn per record or small batch (`fetch.next_batch`): it applies
the batch, then does its upkeep (restores finished, stores settled, a step of window expiry)
and checks whether a failed replica waits to be healed. This times those calls on the
restorer's own code, without Kafka: `--replicas` replicas (tables of 50 partitions, every
`--windowed-every`-th table windowed with a one-hour retention), every one ACTIVE and caught
up, and one record applied to one partition per turn, `--turns` turns:

- `apply`: `Restorer._apply` of the one record (split, store write with the WAL, statuses);
- `upkeep`: `Restorer._upkeep` (the turn's work after its batch);
- `turn`: the two, the CPU a record costs the restorer thread beside its fetch;
- `healing`: `Restorer._healing_due`, whether a failed replica waits (the run loop asked it
  on every turn until 2026-11-29, part of the turn then; every `HEAL_RETRY_S` since).

The reference is the smallest `--replicas` in the same run. Per figure: the median and p99
over the turns, in microseconds of thread CPU time.

    .venv/bin/python benchmarks/bench_turn.py [--replicas 10 500 2000] [--turns 3000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Message

from sparkiq.core.partitioner import partition_for
from sparkiq.core.tables import Format, TableDef, TableKind
from sparkiq.core.topology import TopicPartition
from sparkiq.node.restore import ReplicaState, Restorer
from sparkiq.node.restore.fetch import Fetching
from sparkiq.node.stores.registry import StoreRegistry
from sparkiq.node.stores.storeoptions import SharedMemory

PARTITIONS = 50  # per table
HOUR_MS = 3_600_000
KEYS = 1_000  # keys of the busy partition
PARTS = ("apply", "upkeep", "turn", "healing")


def tables_for(replicas: int, windowed_every: int) -> list[TableDef]:
    out: list[TableDef] = []
    left, i = replicas, 0
    while left > 0:
        n = min(left, PARTITIONS)
        if windowed_every and i % windowed_every == windowed_every - 1:
            out.append(
                TableDef(
                    f"w{i}",
                    f"turn-w{i}",
                    n,
                    Format.STRING,
                    Format.JSON,
                    kind=TableKind.WINDOWED,
                    window_size_ms=60_000,
                    retention_ms=HOUR_MS,
                )
            )
        else:
            out.append(TableDef(f"t{i}", f"turn-t{i}", n, Format.STRING, Format.JSON))
        left -= n
        i += 1
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def measure(replicas: int, turns: int, windowed_every: int, state: Path) -> dict[str, list[float]]:
    tables = tables_for(replicas, windowed_every)
    by_topic = {t.topic: t for t in tables}
    registry = StoreRegistry(state, SharedMemory(256 << 20))
    restorer = Restorer("127.0.0.1:1", registry, by_topic.get)  # never started: no Kafka
    tps = {(t.topic, p) for t in tables for p in range(t.partitions)}
    restorer.assign(tps, set())
    for replica in restorer._replicas.values():
        replica.target = replica.position  # caught up at once
    restorer._upkeep()
    assert {st.state for st in restorer.statuses().values()} == {ReplicaState.ACTIVE}
    busy: TopicPartition = (tables[0].topic, 0)
    fetching = Fetching(None)  # type: ignore[arg-type]  # never starts or stops a partition
    fetching.cursors.update((tp, 0) for tp in tps)
    n = tables[0].partitions
    keys = [k for i in range(3 * n * KEYS) if partition_for(k := b"key-%06d" % i, n) == 0][:KEYS]
    clock: Callable[[], int] = time.thread_time_ns
    out: dict[str, list[float]] = {part: [] for part in PARTS}
    for offset in range(turns):
        msg = Message(
            topic=busy[0],
            partition=busy[1],
            offset=offset,
            key=keys[offset % KEYS],
            value=b'{"seq":%d}' % offset,
            timestamp=(1, 1_700_000_000_000 + offset),
        )
        t0 = clock()
        restorer._apply(fetching, [msg])
        t1 = clock()
        restorer._upkeep()
        t2 = clock()
        restorer._healing_due()
        t3 = clock()
        for part, ns in zip(PARTS, (t1 - t0, t2 - t1, t2 - t0, t3 - t2), strict=True):
            out[part].append(ns / 1000)
    status = restorer.status(busy)
    assert status is not None
    assert status.position == turns, status
    for t in tables:
        for p in range(t.partitions):
            registry.close(t.name, p)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, nargs="+", default=[10, 500, 2000])
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--windowed-every", type=int, default=4, help="0: none windowed")
    args = parser.parse_args()
    print(
        f"{args.turns:,} turns of one record each; every {args.windowed_every}th table windowed"
        " (0: none); thread CPU per turn, us: median / p99"
    )
    print(f"{'replicas':>8}  " + "  ".join(f"{part:>17}" for part in PARTS))
    for replicas in args.replicas:
        with tempfile.TemporaryDirectory(prefix="sparkiq-bench-turn-") as tmp:
            out = measure(replicas, args.turns, args.windowed_every, Path(tmp))
        cells = [f"{pct(out[p], 0.5):8.1f} / {pct(out[p], 0.99):6.1f}" for p in PARTS]
        print(f"{replicas:>8}  " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
