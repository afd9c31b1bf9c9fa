"""Where a streaming run's large micro-batches spend their time, from Spark's event log.

Run a pipeline (or a benchmark that runs one, e.g. ``bench_pipeline.py``) with Spark's
event log on, then summarize it::

    .venv/bin/python benchmarks/bench_pipeline.py --no-freshness --run-in 120 \\
        --conf spark.eventLog.enabled=true --conf spark.eventLog.dir=/tmp/ev
    .venv/bin/python benchmarks/spark_eventlog.py /tmp/ev/local-...  [--min-rows 1000]

For every query, over its micro-batches of at least ``--min-rows`` input rows (a burst's):
Spark's ``durationMs`` parts summed (the whole batch, ``addBatch`` the jobs and the sink,
the offsets, planning and the logs), and the batch's Spark stages by kind: ``map`` (a
stage that writes a shuffle: the read, the parse and the partial aggregation before it),
``reduce`` (a stage that reads one: the aggregation with its state store and what follows
it in the stage, the Kafka write among it), ``single`` (neither: a stateless query's read,
parse and write in one stage, or a job over a cached or collected batch); for each kind its
wall time (submission to completion, stages of a batch run one after another) and its
tasks' run and CPU time. ``outside stages`` is the batch's time with no stage of it running:
the driver's (offsets, planning, the logs, ``foreachBatch``'s Python, collecting). The
bursts: batches of any query less than a second apart, grouped; their wall time and rows,
and each batch's start (s after the burst's first), duration and rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

PROGRESS = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent"
QUERY_ID = "sql.streaming.queryId"
BATCH_ID = "streaming.sql.batchId"


@dataclass
class Stage:
    """A completed stage: its times (ms since the epoch) and its tasks' totals."""

    start: int
    end: int
    run_ms: float
    cpu_ms: float
    shuffle_write: float
    shuffle_read: float

    @property
    def kind(self) -> str:
        if self.shuffle_write:
            return "map"
        return "reduce" if self.shuffle_read else "single"


@dataclass
class Batch:
    """A micro-batch: its query, rows, start and Spark's ``durationMs``, and its stages."""

    query: str
    batch: int
    rows: int
    start: int
    duration: dict[str, int]
    stages: list[Stage] = field(default_factory=list)

    @property
    def end(self) -> int:
        return self.start + self.duration.get("triggerExecution", 0)


def _epoch_ms(timestamp: str) -> int:
    return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)


def _accumulable(info: dict[str, Any], name: str) -> float:
    for acc in info.get("Accumulables", []):
        if acc.get("Name") == name:
            return float(acc.get("Value", 0))
    return 0.0


def _lines(path: Path) -> Iterator[str]:
    """The events of *path*: a file, or Spark's rolling log directory (``eventlog_v2_*``);
    zstd-compressed files (Spark's default codec) through the ``zstd`` command."""
    files = [path]
    if path.is_dir():
        files = sorted(path.glob("events_*"), key=lambda f: int(f.name.split("_")[1]))
    for file in files:
        if file.suffix == ".zstd":
            out = subprocess.run(["zstd", "-dc", str(file)], capture_output=True, check=True)
            yield from out.stdout.decode().splitlines()
        else:
            with file.open() as lines:
                yield from lines


def read_log(path: Path) -> list[Batch]:
    """Every micro-batch of the event log *path* with its stages."""
    stage_of: dict[int, tuple[str, int]] = {}  # stage id -> (query id, batch id)
    stages: dict[tuple[str, int], list[Stage]] = defaultdict(list)
    batches: list[Batch] = []
    names: dict[str, str] = {}
    for line in _lines(path):
        event = json.loads(line)
        kind = event.get("Event")
        if kind == "SparkListenerJobStart":
            props = event.get("Properties") or {}
            if QUERY_ID in props and BATCH_ID in props:
                for sid in event.get("Stage IDs", []):
                    stage_of[sid] = (props[QUERY_ID], int(props[BATCH_ID]))
        elif kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            owner = stage_of.get(info["Stage ID"])
            if owner is None or "Submission Time" not in info:
                continue  # skipped (its output was there) or not a query's
            stages[owner].append(
                Stage(
                    start=int(info["Submission Time"]),
                    end=int(info["Completion Time"]),
                    run_ms=_accumulable(info, "internal.metrics.executorRunTime"),
                    cpu_ms=_accumulable(info, "internal.metrics.executorCpuTime") / 1e6,
                    shuffle_write=_accumulable(
                        info, "internal.metrics.shuffle.write.recordsWritten"
                    ),
                    shuffle_read=_accumulable(info, "internal.metrics.shuffle.read.recordsRead"),
                )
            )
        elif kind == PROGRESS:
            p = event["progress"]
            names[p["id"]] = p.get("name") or p["id"]
            batches.append(
                Batch(
                    query=p["id"],
                    batch=int(p["batchId"]),
                    rows=sum(int(s.get("numInputRows", 0)) for s in p.get("sources", [])),
                    start=_epoch_ms(p["timestamp"]),
                    duration={k: int(v) for k, v in p["durationMs"].items()},
                )
            )
    for b in batches:
        b.stages = stages.get((b.query, b.batch), [])
        b.query = names.get(b.query, b.query)
    return batches


def _busy_ms(spans: list[tuple[int, int]]) -> int:
    """The time covered by *spans* (start, end), overlaps counted once."""
    total, reach = 0, None
    for start, end in sorted(spans):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def bursts(batches: list[Batch], gap_ms: int = 1000) -> list[list[Batch]]:
    """*batches* grouped where one starts less than *gap_ms* after the ones before end."""
    groups: list[list[Batch]] = []
    reach = -1
    for b in sorted(batches, key=lambda b: b.start):
        if not groups or b.start > reach + gap_ms:
            groups.append([])
        groups[-1].append(b)
        reach = max(reach, b.end)
    return groups


def summarize(batches: list[Batch], min_rows: int, last: int | None = None) -> None:
    big = [b for b in batches if b.rows >= min_rows]
    if not big:
        raise SystemExit(f"no micro-batch of at least {min_rows} rows in the log")
    if last:  # the last bursts only (bench_pipeline.py's measured ones, after its warm-up)
        big = [b for group in bursts(big)[-last:] for b in group]
    print(f"{len(big)} micro-batches of >= {min_rows:,} rows")
    for group in bursts(big):
        start, end = min(b.start for b in group), max(b.end for b in group)
        queries = sorted({b.query for b in group})
        rows = {q: sum(b.rows for b in group if b.query == q) for q in queries}
        print(
            f"burst at {datetime.fromtimestamp(start / 1000):%H:%M:%S}: "
            f"{(end - start) / 1000:.2f} s, "
            + ", ".join(
                f"{q} {rows[q]:,} rows in {sum(b.query == q for b in group)} batches"
                for q in queries
            )
        )
        for b in sorted(group, key=lambda b: b.start):
            print(
                f"    {(b.start - start) / 1000:5.2f} s  {b.query}: "
                f"{b.duration.get('triggerExecution', 0)} ms, {b.rows:,} rows"
            )
    for query in sorted({b.query for b in big}):
        mine = [b for b in big if b.query == query]
        total = sum(b.duration.get("triggerExecution", 0) for b in mine)
        print(
            f"\nquery {query}: {len(mine)} batches, {sum(b.rows for b in mine):,} rows, "
            f"{total / 1000:.2f} s"
        )
        parts = sorted({k for b in mine for k in b.duration if k != "triggerExecution"})
        print(
            "  durationMs summed: "
            + ", ".join(
                f"{k} {sum(b.duration.get(k, 0) for b in mine) / 1000:.2f} s" for k in parts
            )
        )
        by_kind: dict[str, list[Stage]] = defaultdict(list)
        for b in mine:
            for s in b.stages:
                by_kind[s.kind].append(s)
        for kind, ss in sorted(by_kind.items()):
            wall = sum(s.end - s.start for s in ss)
            print(
                f"  stages {kind:>6}: {len(ss)}, wall {wall / 1000:.2f} s "
                f"({wall / total:.0%} of the batches), "
                f"tasks' run {sum(s.run_ms for s in ss) / 1000:.2f} s, "
                f"CPU {sum(s.cpu_ms for s in ss) / 1000:.2f} s"
            )
        outside = sum(
            b.duration.get("triggerExecution", 0) - _busy_ms([(s.start, s.end) for s in b.stages])
            for b in mine
        )
        print(f"  outside stages (the driver): {outside / 1000:.2f} s ({outside / total:.0%})")
        print(
            "  per batch: median "
            f"{statistics.median(b.duration.get('triggerExecution', 0) for b in mine):.0f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "log", type=Path, help="an event log: a file or directory in spark.eventLog.dir"
    )
    parser.add_argument(
        "--min-rows", type=int, default=1000, help="the batches counted: at least this many rows"
    )
    parser.add_argument(
        "--last-bursts", type=int, help="only the last N bursts (bench_pipeline.py's measured)"
    )
    args = parser.parse_args()
    summarize(read_log(args.log), args.min_rows, args.last_bursts)


if __name__ == "__main__":
    main()
