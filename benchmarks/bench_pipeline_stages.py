"""Where the pipeline's throughput goes: its stages alone, next to Spark's rate source.

`bench_pipeline.py` measures the whole point-of-sale pipeline against the rate-source
reference. This one takes the pipeline apart, in the same run as the same reference, to show
how much of the reference's rate each stage leaves before the next one is added:

1. ``read``: the Kafka source alone into the ``noop`` sink: Spark's own (``--kafka-connector
   builtin``, the default where it is installed) or sparkiq's ``sparkiq-kafka`` (``python``:
   the Python Data Source reading the invoices into Arrow batches), with the options the
   pipeline's reads get (`sparkiq.spark.connector.source_options`; ``--source-option`` sets
   more, ``--sink-option`` for the writes below);
2. ``parse``: the same plus `parse_invoices` and `valid_invoices` (JSON to columns, the
   validity checks) with the whole invoice's schema, as the routes parse it;
   ``parse-tables``: with the part of it the tables need (`pipeline.TABLES_SCHEMA`), as
   the tables' query parses it, and so do the stages below but the routes';
3. ``store-sales``: ``parse-tables`` plus the aggregation the reference runs (sum and
   count per store and 1-minute window, update mode, RocksDB state store), into ``noop``: the
   reference's own work, fed from Kafka instead of generated in the JVM;
4. ``tables``: ``parse-tables`` plus `sparkiq.dev.pos.tables.table_aggregates`, the aggregation
   behind every table and the loyalty notifications of the pipeline's ``tables`` query
   (two or three rows per invoice, one ``groupBy`` of customers, store windows and PRIME
   invoices, update mode), into ``noop``;
5. ``routes``: `parse_invoices` plus the ``pos-routes`` query's records (dead letters,
   shipments, one masked record per line item) into ``noop``; ``routes-kafka``: the same
   through the connector's Kafka sink to the broker (~3.3 records per invoice); ``tables-kafka``:
   stage 4's records written as the pipeline writes them (`BatchProducer` with the
   notifications' `finish`: small micro-batches produced from the driver, large ones by
   the executors' tasks, the notifications' rows finished on the driver);
6. ``read-x2`` and ``parse-x2``: two queries of stage 1 (2) at once in one session: the
   least the pipeline, whose routes and tables are two queries, has to do (streaming
   branches of one source do not share its scan, so each query reads and parses every
   invoice); ``both``: the ``tables`` and ``routes`` stages at once, the pipeline's two
   queries without their Kafka writes; ``both-kafka``: ``tables-kafka`` and
   ``routes-kafka`` at once, the pipeline's two queries (without its serving nodes).

A stage of two queries runs at the rate of the slower one (the pipeline has processed an
invoice when every query has): its figure is the lower of the two queries' medians.

Every stage also has a ``-files`` variant (``tables-files``, ``parse-x2-files``, ...): the same
query over the same invoices read from JSON-lines files by Spark's own ``text`` source, a
file per micro-batch, instead of from the topic by the Kafka source. No Python worker
reads them, so the gap between a stage and its ``-files`` variant is what reading through
Python costs it with ``--kafka-connector python`` (a stand-in for Spark's connector from
before it was installed). (The ``-files`` rows carry no
Kafka key, topic partition or offset; only the dead letters, none here, use them.)

Each stage runs alone in a fresh child Spark session (local[2], the pipeline's settings),
with ``Trigger.AvailableNow`` over invoices already in the topic, twice:

- throughput: micro-batches of ``--batch`` records, like the reference's saturated ones.
  The rate is the median processed rows/s of the full micro-batches after the first
  ``--warmup-batches`` of each query: the first one starts the source's planner process on a
  cold JVM (10-18 s), and the next few get faster as the JIT compiles the plan, so leaving
  them out favours the stages;
- latency: micro-batches of ``--small-batch`` records (one second's input at 20
  invoices/s), the median batch duration next to the reference's at the same
  rate. Table freshness cannot beat one micro-batch of the query that writes the table.

    .venv/bin/python benchmarks/bench_pipeline_stages.py [--invoices 200000] [--batch 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench_pipeline import rate_reference
from sparkiq.dev.broker import make_broker, spark_connector_for
from sparkiq.dev.pos.generator import Invoice, InvoiceGenerator, produce_invoices
from sparkiq.dev.pos.pipeline import DEFAULT_TOPICS
from sparkiq.kafka.admin import create_topic
from sparkiq.spark.session import kafka_connector_jars

SOURCE = "pos"
SMALL = "pos-small"  # the same invoices, read in small batches
STAGES = (
    "read",
    "parse",
    "parse-tables",
    "store-sales",
    "tables",
    "routes",
    "routes-kafka",
    "tables-kafka",
    "read-x2",
    "parse-x2",
    "both",
    "both-kafka",
)

STAGE = r"""
import json, os, sys
from pyspark.sql import functions as F
from sparkiq.dev.pos import pipeline as pos
from sparkiq.dev.pos.tables import table_aggregates
from sparkiq.spark.session import local_session

from sparkiq.spark.connector import KafkaConnector, sink_options, source_options

name, bootstrap, source, small_source, batch, small_batch, partitions, checkpoint, files, conn = (
    sys.argv[1:11])
spark = local_session("bench-stage", master="local[2]", shuffle_partitions=int(partitions),
                      conf=json.loads(os.environ.get("BENCH_STAGE_CONF", "{}")))
from_files = name.endswith("-files")
stage = name.removesuffix("-files")
connector = KafkaConnector(conn)
# Options over the connector's (`sparkiq.spark.connector`, where the pipeline's reads and
# writes get theirs): --source-option, --sink-option.
extra = json.loads(os.environ.get("BENCH_STAGE_OPTIONS", "{}"))

def with_extra(io, kind):
    return io.format, {**io.options, **extra.get(kind, {})}

sink_format, sink_opts = with_extra(sink_options(connector, bootstrap_servers=bootstrap), "sink")

def raw(topic, per_batch):
    if from_files:
        # A file of per_batch invoices per micro-batch, as Kafka rows without key or offset.
        return (spark.readStream.format("text").option("maxFilesPerTrigger", 1)
                .load(f"{files}/{topic}")
                .select(F.lit(None).cast("binary").alias("key"),
                        F.col("value").cast("binary").alias("value"), F.lit(topic).alias("topic"),
                        F.lit(0).alias("partition"), F.lit(0).cast("long").alias("offset")))
    fmt, opts = with_extra(source_options(connector, bootstrap_servers=bootstrap,
                                          topics=(topic,), max_offsets_per_trigger=int(per_batch)),
                           "source")
    return spark.readStream.format(fmt).options(**opts).load()

def query(kind, topic, per_batch, cp):
    df = raw(topic, per_batch)
    mode = "append"
    if kind.startswith("routes"):
        df = pos._routes(pos.parse_invoices(df), pos.DEFAULT_TOPICS)
        if kind == "routes-kafka":
            return (df.writeStream.format(sink_format).options(**sink_opts)
                    .trigger(availableNow=True).option("checkpointLocation", cp).start())
    elif not kind.startswith("read"):
        # parse, parse-x2: the whole invoice (the routes' parse); the rest: the tables' part.
        full = kind in ("parse", "parse-x2")
        df = pos.valid_invoices(
            pos.parse_invoices(df, pos.INVOICE_SCHEMA if full else pos.TABLES_SCHEMA))
    if kind == "store-sales":
        df = (df.withColumn("ts", F.timestamp_millis("CreatedTime"))
              .withWatermark("ts", "10 minutes").groupBy("StoreID", F.window("ts", "1 minute"))
              .agg(F.sum("TotalAmount").alias("Sales"), F.count(F.lit(1)).alias("Invoices")))
        mode = "update"
    if kind == "tables":
        df, mode = table_aggregates(df), "update"
    if kind == "tables-kafka":
        return tables_to_kafka(df, cp)
    return (df.writeStream.format("noop").outputMode(mode).trigger(availableNow=True)
            .option("checkpointLocation", cp).start())

def tables_to_kafka(df, cp):
    from sparkiq.dev.pos.loyalty import with_notifications
    from sparkiq.dev.pos.tables import table_records
    from sparkiq.spark.connector import KafkaIO
    from sparkiq.spark.kafkawrite import FINISH_FLAG, BatchProducer
    from sparkiq.spark.materialize import define_table, prepare_table, with_window_partitions

    tables = [define_table("rewards", app="bench"), define_table("latest-invoice", app="bench"),
              define_table("store-sales", app="bench", window_size="1 minute")]
    for table in tables:
        prepare_table(bootstrap, table, app="bench")
    windowed = tables[2]
    sink = KafkaIO(*with_extra(
        sink_options(connector, bootstrap_servers=bootstrap, windowed_topics=[windowed.topic]),
        "sink"))
    records = table_records(df, *tables, pos.DEFAULT_TOPICS["loyalty"])
    if connector is KafkaConnector.BUILTIN:  # as `PipelineContext.write` does
        records = with_window_partitions(records, {windowed.topic: windowed.partitions})
    records = records.withColumn(FINISH_FLAG, F.col("note").isNotNull())
    producer = BatchProducer(sink, cp, local=True, finish=with_notifications)
    return (records.writeStream.outputMode("update")
            .trigger(availableNow=True).option("checkpointLocation", cp)
            .foreachBatch(producer).start())

PARTITIONS = 3  # of the topics (main)

def run(topic, per_batch, cp):
    # read-x2, parse-x2, both: two queries at once, each reading (and parsing) every invoice.
    if stage.startswith("both"):  # both, both-kafka
        kinds = [f"tables{stage[4:]}", f"routes{stage[4:]}"]
    else:
        kinds = [stage.removesuffix("-x2")] * (2 if stage.endswith("-x2") else 1)
    queries = [query(kind, topic, per_batch, f"{cp}-{i}") for i, kind in enumerate(kinds)]
    for q in queries:
        q.awaitTermination()
    # Full batches: Spark's Kafka source rounds each partition's share of the cap down, so
    # its batches may be short by up to one record per partition of the topic.
    return [[p for p in q.recentProgress if p.numInputRows >= int(per_batch) - PARTITIONS]
            for q in queries]

big = run(source, batch, checkpoint + "-big")
small = run(small_source, small_batch, checkpoint + "-small")
print(json.dumps({
    "rows_per_s": [[p.processedRowsPerSecond for p in q] for q in big],
    "batch_ms": [[p.durationMs["triggerExecution"] for p in q] for q in big],
    "phases_ms": [[dict(p.durationMs) for p in q] for q in big],
    "small_batch_ms": [[p.durationMs["triggerExecution"] for p in q] for q in small],
}))
spark.stop()
"""


def run_stage(
    stage: str,
    bootstrap: str,
    batch: int,
    small_batch: int,
    shuffle_partitions: int,
    work: Path,
    conf: dict[str, str],
    connector: str,
    options: dict[str, dict[str, str]],
) -> dict[str, Any]:
    """One stage alone in a child process: its full micro-batches over both topics."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            STAGE,
            stage,
            bootstrap,
            SOURCE,
            SMALL,
            str(batch),
            str(small_batch),
            str(shuffle_partitions),
            str(work / f"cp-{stage}-{time.time_ns()}"),
            str(work / "files"),
            connector,
        ],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "BENCH_STAGE_CONF": json.dumps(conf),
            "BENCH_STAGE_OPTIONS": json.dumps(options),
        },
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"stage {stage} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _phases(progress: list[dict[str, int]]) -> str:
    """The median of each part of Spark's ``durationMs`` over a query's counted batches."""
    names = sorted({k for p in progress for k in p}, key=lambda k: k != "triggerExecution")
    medians = {k: statistics.median(p.get(k, 0) for p in progress) for k in names}
    return "median ms " + ", ".join(f"{k} {v:.0f}" for k, v in medians.items() if v)


def write_files(directory: Path, invoices: list[Invoice], per_file: int) -> None:
    """*invoices* as JSON lines, *per_file* to a file (the `-files` stages' micro-batches)."""
    directory.mkdir(parents=True)
    for n, first in enumerate(range(0, len(invoices), per_file)):
        lines = b"".join(orjson.dumps(inv) + b"\n" for inv in invoices[first : first + per_file])
        (directory / f"{n:05d}.json").write_bytes(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--invoices", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=20_000, help="records per large batch")
    parser.add_argument(
        "--small-batch", type=int, default=20, help="records per small batch (1 s at 20/s)"
    )
    parser.add_argument("--small-batches", type=int, default=25)
    parser.add_argument(
        "--warmup-batches", type=int, default=5, help="batches of each pass not counted"
    )
    parser.add_argument("--seconds", type=float, default=30.0, help="rate reference duration")
    parser.add_argument(
        "--stages",
        default=",".join(STAGES),
        help=f"comma-separated, of {', '.join(STAGES)}, each also with '-files'",
    )
    parser.add_argument(
        "--shuffle-partitions", type=int, default=1, help="of the stages and the reference"
    )
    parser.add_argument(
        "--conf", action="append", default=[], help="KEY=VALUE Spark setting of the stages"
    )
    parser.add_argument(
        "--broker",
        choices=["kafka", "dev"],
        default="kafka",
        help="Apache Kafka (KRaft, one node; the default) or the dev broker",
    )
    parser.add_argument(
        "--source-option",
        action="append",
        default=[],
        help="KEY=VALUE over the connector's read options (e.g. kafka.fetch.max.bytes=...)",
    )
    parser.add_argument(
        "--sink-option",
        action="append",
        default=[],
        help="KEY=VALUE over the connector's write options (e.g. kafka.linger.ms=20)",
    )
    parser.add_argument(
        "--kafka-connector",
        choices=["builtin", "python"],
        help="the stages' Kafka reads and writes: Spark's connector or sparkiq's (default: "
        "builtin on Apache Kafka where installed, python on the dev broker)",
    )
    args = parser.parse_args()
    conf = dict(item.split("=", 1) for item in args.conf)
    options = {
        "source": dict(item.split("=", 1) for item in args.source_option),
        "sink": dict(item.split("=", 1) for item in args.sink_option),
    }
    connector = args.kafka_connector or (
        "builtin"
        if spark_connector_for(args.broker) == "auto" and kafka_connector_jars()
        else "python"
    )
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    if not stages or not {s.removesuffix("-files") for s in stages} <= set(STAGES):
        parser.error(f"--stages: choose among {', '.join(STAGES)}, each also with '-files'")
    if args.invoices < (args.warmup_batches + 3) * args.batch:
        parser.error("--invoices must leave at least 3 large batches after --warmup-batches")
    if args.small_batches < args.warmup_batches + 3:
        parser.error("--small-batches must leave at least 3 after --warmup-batches")

    print(
        f"load average before: {os.getloadavg()}; Kafka connector: {connector}; "
        f"options over its own: {options}; Spark settings: {conf}",
        flush=True,
    )
    ref = rate_reference(args.batch, args.small_batch, args.seconds, args.shuffle_partitions)
    print(
        f"rate source reference: {ref['throughput']:,.0f} rows/s; batches of "
        f"{args.small_batch} rows: {ref['batch_ms']:.0f} ms",
        flush=True,
    )

    work = Path(tempfile.mkdtemp(prefix="sparkiq-bench-stages-"))
    rates: dict[str, float] = {}
    small_ms: dict[str, float] = {}
    with make_broker(args.broker, data_dir=work / "broker") as broker:
        bootstrap = broker.bootstrap_servers
        gen = InvoiceGenerator(7)
        now_ms = int(time.time() * 1000)
        for topic, n, per_file in (
            (SOURCE, args.invoices, args.batch),
            (SMALL, args.small_batch * args.small_batches, args.small_batch),
        ):
            create_topic(bootstrap, topic, 3)  # the stage's PARTITIONS
            written = produce_invoices(
                bootstrap, topic, gen.invoices(n, start_ms=now_ms, step_ms=5)
            )
            print(f"{n:,} invoices in topic {topic!r}", flush=True)
            if any(s.endswith("-files") for s in stages):
                write_files(work / "files" / topic, written, per_file)
        # Where routes-kafka and tables-kafka write.
        for name in ("shipments", "hadoop", "dead_letter", "loyalty"):
            create_topic(bootstrap, DEFAULT_TOPICS[name], 3)
        for stage in stages:
            result = run_stage(
                stage,
                bootstrap,
                args.batch,
                args.small_batch,
                args.shuffle_partitions,
                work,
                conf,
                connector,
                options,
            )
            # Per query (parse-x2 and both run two), without its warm-up batches; a stage
            # goes at its slower query's rate and waits for its slower small batches.
            skip = args.warmup_batches
            counted = [q[skip:] for q in result["rows_per_s"]]
            small = [q[skip:] for q in result["small_batch_ms"]]
            if not all(counted) or not all(small):
                raise SystemExit(f"stage {stage}: no full batch after the warm-up ones")
            rates[stage] = min(statistics.median(q) for q in counted)
            small_ms[stage] = max(statistics.median(q) for q in small)
            durations = "; ".join(
                ", ".join(f"{ms / 1000:.2f}" for ms in q) for q in result["batch_ms"]
            )
            print(
                f"{stage:>12}: {rates[stage]:>9,.0f} rows/s = "
                f"{rates[stage] / ref['throughput']:.2f} of the reference "
                f"(batches of {args.batch:,}: "
                f"{durations} s); "
                f"batches of {args.small_batch}: median {small_ms[stage]:.0f} ms = "
                f"{small_ms[stage] / ref['batch_ms']:.2f} of the reference's",
                flush=True,
            )
            for i, phases in enumerate(result["phases_ms"]):
                print(f"{'':>14}query {i}: {_phases(phases[skip:])}", flush=True)
    print(f"load average after: {os.getloadavg()}")
    print(
        f"\nthroughput against the reference's {ref['throughput']:,.0f} rows/s: "
        + ", ".join(f"{s} {rates[s] / ref['throughput']:.2f}" for s in stages)
        + " (the whole pipeline's goal: >= 0.2)"
    )
    print(
        f"batch of {args.small_batch} against the reference's {ref['batch_ms']:.0f} ms: "
        + ", ".join(f"{s} {small_ms[s] / ref['batch_ms']:.2f}" for s in stages)
    )


if __name__ == "__main__":
    main()
