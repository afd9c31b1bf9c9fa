"""End to end: the point-of-sale pipeline on Spark local mode, three serving nodes, an oracle.

Seeded invoices (with malformed records mixed in) go to the source topic; `sparkiq run` runs
`sparkiq/dev/pos/pipeline.py` as a child process; three `sparkiq serve` processes serve its
tables. Every key of every table, asked of every node, must equal `PosOracle`; the four
topics the pipeline writes must hold exactly the oracle's records; once more with
``--trigger realtime`` (the routes in Spark's Real-Time Mode). The second test kills the
pipeline, run with ``--trigger realtime``, (SIGKILL of its process group) in the middle of
the stream and restarts it from its checkpoints.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import orjson
import pytest

import sparkiq.dev.pos.pipeline as pos_pipeline
from sparkiq.dev.broker import spark_connector_for
from sparkiq.dev.pos.generator import Invoice, InvoiceGenerator, produce_one
from sparkiq.dev.pos.oracle import PosOracle, check_notifications, points_for
from sparkiq.spark.connector import KafkaConnector
from sparkiq.spark.runner import SCRATCH_DIR
from tests.support.brokers import bootstrap_of
from tests.support.e2e import read_topic
from tests.support.pos import (
    START_MS,
    PosRun,
    seeded_invoices,
    wait_tables_equal,
    wait_until,
)

# Spark starts three queries one by one on two cores: allow more than the suite's default.
pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.timeout(1200)]

MALFORMED = b'{"InvoiceNumber": 17,'


def _json_records(records: list[tuple[bytes | None, bytes | None]]) -> Counter[bytes]:
    """A topic's records as a multiset of canonical (key, parsed value) JSON."""
    return Counter(
        orjson.dumps(
            [k.decode() if k else None, orjson.loads(v) if v else None], option=orjson.OPT_SORT_KEYS
        )
        for k, v in records
    )


def check_sink_topics(run: PosRun, oracle: PosOracle, malformed: int) -> None:
    shipments = read_topic(run.bootstrap, run.topics["shipments"])
    want_shipments = [(store.encode(), orjson.dumps(inv)) for store, inv in oracle.shipments]
    assert _json_records(shipments) == _json_records(want_shipments)

    hadoop = read_topic(run.bootstrap, run.topics["hadoop"])
    want_hadoop = [(number.encode(), orjson.dumps(line)) for number, line in oracle.hadoop]
    assert len(hadoop) == len(want_hadoop)
    assert _json_records(hadoop) == _json_records(want_hadoop)
    assert not any(b"CustomerCardNo" in (v or b"") for _, v in hadoop), "card numbers leaked"

    loyalty = [
        orjson.loads(v or b"null") for _, v in read_topic(run.bootstrap, run.topics["loyalty"])
    ]
    assert check_notifications(oracle, loyalty) == []

    dead = [
        orjson.loads(v or b"null") for _, v in read_topic(run.bootstrap, run.topics["dead_letter"])
    ]
    assert len(dead) == malformed
    assert {d["value"].encode() for d in dead} == {MALFORMED}
    assert {d["reason"] for d in dead} == {"not a JSON document"}
    assert all(d["source_topic"] == run.topics["source"] for d in dead)


def counted_dead_letters(run: PosRun) -> int:
    status = run.pipeline.status() or {}
    for query in status.get("queries", []):
        if "pos" in query["observed_total"]:  # the query that writes the routes
            return int(query["observed_total"]["pos"].get("dead_letters", -1))
    return -1


@pytest.fixture
def pos_run(
    tmp_path: Path,
    unique_name: Callable[[str], str],
    request: pytest.FixtureRequest,
) -> Iterator[PosRun]:
    """A POS run on Apache Kafka, or as the test's parameter (layout, broker kind, trigger)
    says."""
    layout, kind, trigger = getattr(request, "param", (pos_pipeline.LAYOUTS[0], "kafka", MB))
    run = PosRun(
        bootstrap_of(request, kind),
        tmp_path,
        unique_name("pos"),
        layout=layout,
        connector=KafkaConnector(spark_connector_for(kind)),
        trigger=trigger,
    )
    try:
        yield run
    finally:
        run.stop()


# -- the tests ------------------------------------------------------------------------------


MB = "1 second"  # micro-batches every second
RTM = "realtime"  # Real-Time Mode for the queries that can run in it
# The one-query layout on Apache Kafka, with Spark's connector where installed; the two
# queries on the dev broker, for compatibility, with sparkiq's Python source and sink
# (`spark_connector_for`), and on Apache Kafka in Real-Time Mode where Spark can (the
# routes). The two queries in micro-batches on Apache Kafka are the default layout of
# tests/e2e/test_spark_cluster.py and test_broker_failover.py, which check the same oracle.
RUNS = [
    (pos_pipeline.LAYOUTS[1], "kafka", MB),
    (pos_pipeline.LAYOUTS[0], "dev", MB),
    (pos_pipeline.LAYOUTS[0], "kafka", RTM),
]
RUN_IDS = [f"{layout}-{kind}" + ("-realtime" if t == RTM else "") for layout, kind, t in RUNS]


def check_modes(run: PosRun) -> None:
    """In a Real-Time run with Spark's connector the routes' query runs in Real-Time Mode
    and the tables' query, which finishes on the driver, says why it does not; with
    sparkiq's connector neither does, and each says why."""
    log = run.pipeline.log_path.read_text()
    statuses = {q["name"]: q["trigger"] for q in (run.pipeline.status() or {})["queries"]}
    assert "query 'tables' runs in micro-batches, not Real-Time Mode: its finishing step" in log
    assert statuses["tables"] == "microbatch"
    if run.connector is KafkaConnector.BUILTIN:
        assert "query 'pos-routes' runs in Real-Time Mode" in log
        assert statuses["pos-routes"] == "realtime"
    else:
        assert "query 'pos-routes' runs in micro-batches, not Real-Time Mode" in log
        assert statuses["pos-routes"] == "microbatch"


@pytest.mark.parametrize("pos_run", RUNS, indirect=True, ids=RUN_IDS)
def test_every_table_from_every_node_and_every_topic_equal_the_oracle(pos_run: PosRun) -> None:
    invoices = seeded_invoices(seed=21, count=3_000)
    malformed = pos_run.produce(invoices, malformed_every=100)
    pos_run.start()
    if "realtime" in pos_run.pipeline.extra_args:
        check_modes(pos_run)
    pos_run.wait_caught_up()
    oracle = PosOracle.of(invoices)
    assert malformed == 30
    assert len(oracle.store_sales) > 6, "the data spans several windows per store"
    pos_run.cluster.wait_ready()
    wait_tables_equal(pos_run, oracle)
    check_sink_topics(pos_run, oracle, malformed)
    # The dead letters are counted too: an observed metric of the routing query, summed
    # over its micro-batches by `sparkiq run` and shown in its progress lines.
    assert counted_dead_letters(pos_run) == malformed
    check_read_your_write(pos_run, invoices)


def check_read_your_write(run: PosRun, invoices: list[Invoice]) -> None:
    """A fresh invoice of a PRIME customer, read back through `rewards` at once with
    `after_source` = where Kafka put it: every answer includes its points."""
    gen = InvoiceGenerator(99, stores=6, customers=150)
    fresh = next(
        inv
        for inv in gen.invoices(500, start_ms=START_MS + 10**7, step_ms=40)
        if inv["CustomerType"] == "PRIME" and points_for(inv) > 0
    )
    card = str(fresh["CustomerCardNo"])
    want = PosOracle.of([*invoices, fresh]).rewards[card]
    before = PosOracle.of(invoices).rewards.get(card)
    assert want != before
    partition, offset = produce_one(run.bootstrap, run.topics["source"], fresh)
    started = time.monotonic()
    source = f"{run.topics['source']}:{partition}:{offset}"
    answered = unavailable = 0
    with httpx.Client(timeout=30.0) as http:
        for url in run.cluster.urls:
            while True:
                r = http.get(
                    f"{url}/v1/tables/rewards/keys/{quote(card)}", params={"after_source": source}
                )
                if r.status_code == 503:  # the pipeline has not committed it yet: ask again
                    unavailable += 1
                    assert time.monotonic() - started < 120, r.text
                    continue
                assert r.status_code == 200, r.text
                assert r.json()["value"] == want, f"{url} answered {r.json()} before the invoice"
                answered += 1
                break
    print(
        f"\nafter_source={source}: {answered} nodes answered with the invoice, "
        f"{unavailable} 503s first, {time.monotonic() - started:.1f}s"
    )


# Killed in Real-Time Mode: the routes' query then replays what its batch had not
# checkpointed (at least once), and the tables' query, in micro-batches in every mode,
# replays its cut-off micro-batch as it would without.
KILLED = (pos_pipeline.LAYOUTS[0], "kafka", RTM)


@pytest.mark.parametrize("pos_run", [KILLED], indirect=True, ids=["two-queries-kafka-realtime"])
def test_pipeline_killed_mid_stream_resumes_without_loss_or_double_counting(
    pos_run: PosRun,
) -> None:
    invoices = seeded_invoices(seed=22, count=4_000)
    first, second = invoices[:2_000], invoices[2_000:]
    malformed = pos_run.produce(first, malformed_every=250)
    pos_run.start()
    check_modes(pos_run)
    pos_run.wait_caught_up()
    # More invoices arrive; kill the pipeline while it works on them.
    malformed += pos_run.produce(second[:1_000], malformed_every=250)
    wait_until(
        lambda: any(
            (q or {}).get(pos_run.topics["source"]) is not None
            and sum((q or {})[pos_run.topics["source"]].values()) > 2_008
            for q in pos_run.pipeline.processed()
        ),
        "a micro-batch of the second part",
        300,
        pos_run.pipeline,
    )
    pos_run.pipeline.stop(kill=True)
    # The killed run could not remove its Spark scratch space; the next run does.
    stale = pos_run.pipeline.checkpoint_dir / SCRATCH_DIR / "left-by-the-killed-run"
    stale.touch()
    malformed += pos_run.produce(second[1_000:], malformed_every=250)
    pos_run.pipeline.start()
    pos_run.wait_caught_up()
    assert not stale.exists()
    oracle = PosOracle.of(invoices)
    pos_run.cluster.wait_ready()
    wait_tables_equal(pos_run, oracle)
    loyalty = [
        orjson.loads(v or b"null")
        for _, v in read_topic(pos_run.bootstrap, pos_run.topics["loyalty"])
    ]
    # A micro-batch cut short by the kill is written again on restart: identical duplicates
    # are allowed, lost or double-counted points are not.
    assert check_notifications(oracle, loyalty) == []
    dead = read_topic(pos_run.bootstrap, pos_run.topics["dead_letter"])
    positions = {
        (d["source_partition"], d["source_offset"])
        for d in (orjson.loads(v or b"{}") for _, v in dead)
    }
    assert len(positions) == malformed, "every malformed record lands in the dead-letter topic"
    pos_run.pipeline.stop()
    assert not (pos_run.pipeline.checkpoint_dir / SCRATCH_DIR).exists()
    # The stop is clean: no query's thread dies (a StackOverflowError in Spark's check of a
    # foreachBatch error, `sparkiq.spark.batcherrors`), no task outlives the session.
    log = pos_run.pipeline.log_path.read_text(errors="replace")
    after_stop = log.rpartition("SIGTERM received, stopping the queries")[2]
    assert log.count("SIGTERM received") == 1, "one graceful stop: the first run was killed"
    noise = [
        line
        for line in after_stop.splitlines()
        if re.search(r"StackOverflowError|Exception in thread| ERROR |Traceback", line)
    ]
    assert not noise, f"{pos_run.pipeline.log_path}:\n" + "\n".join(noise[:10])
