"""`sparkiq demo`: the whole product on one machine, from invoices to HTTP answers.

It starts a Kafka broker (Apache Kafka in KRaft mode; the dev broker with `--broker dev`), a
generator writing point-of-sale invoices to `pos`, the Spark
pipeline of `sparkiq/dev/pos/pipeline.py` (`sparkiq run`, local mode) and serving nodes; shows
progress while the pipeline starts and catches up with the first invoices; then prints the
console's URL (`/ui/` on any node), the node URLs and example queries that work (curl and
`sparkiq get`), and keeps generating invoices until Ctrl-C or `--duration`. Everything binds
to 127.0.0.1 and is stopped by PID.

The pipeline runs with ``--trigger realtime``: each query in Spark's Real-Time Mode where the
installed Spark runs it there (the routes, on Spark's Kafka connector), the others in
micro-batches (the pipeline's log says why). Once up, the demo measures how fresh its
answers are (`sparkiq.dev.freshness`) and prints it beside how each query runs.

Its output suits a terminal and a file alike: on a terminal the progress while it starts is
one line drawn again in place; in a file or a pipe it is a plain line every few seconds
(`sparkiq.core.statusline`). Its last line says how it ended (`last_words`): after
`--duration`, at Ctrl-C, by SIGTERM, or failed.
"""

from __future__ import annotations

import enum
import itertools
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import click
import httpx

import sparkiq.dev.pos.pipeline as pos_pipeline
from sparkiq.core.errors import SparkiqError
from sparkiq.core.statusline import StatusLine
from sparkiq.dev.broker import make_broker, spark_connector_for
from sparkiq.dev.freshness import measure_freshness
from sparkiq.dev.localcluster import LocalCluster
from sparkiq.dev.localpipeline import PipelineProcess
from sparkiq.dev.pos.generator import Invoice, InvoiceGenerator, produce_invoices, produce_one
from sparkiq.dev.pos.oracle import points_for
from sparkiq.dev.processes import Terminated, sigterm_as_interrupt
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.offsets import true_end_offsets

SOURCE = pos_pipeline.DEFAULT_TOPICS["source"]
SOURCE_PARTITIONS = 3
TABLES = ("rewards", "latest-invoice", "store-sales")
FRESHNESS_PROBES = 20
_MODE_WORDS = {"realtime": "in Real-Time Mode", "microbatch": "in micro-batches"}


def _step(text: str) -> None:
    click.echo(click.style("==> ", fg="cyan") + text)


class DemoEnd(enum.Enum):
    """How a demo ended."""

    DURATION = "duration"  # --duration ran out
    INTERRUPTED = "interrupted"  # Ctrl-C
    TERMINATED = "terminated"  # SIGTERM
    FAILED = "failed"  # a part of it failed (the error follows)


def how_it_ends(duration_s: float | None) -> str:
    """The line that tells, once the demo is up, what ends it."""
    if duration_s is None:
        return "new invoices keep arriving, so answers change; Ctrl-C stops everything."
    return (
        f"new invoices keep arriving, so answers change; everything stops in {duration_s:g} s "
        "(--duration), or at Ctrl-C."
    )


def last_words(end: DemoEnd, duration_s: float | None) -> str:
    """The demo's last line: how it ended, once everything it started has stopped."""
    if end is DemoEnd.DURATION:
        return (
            f"demo stopped after {duration_s or 0:g} s (--duration); everything it started is "
            "stopped."
        )
    if end is DemoEnd.INTERRUPTED:
        return "demo interrupted (Ctrl-C); everything it started is stopped."
    if end is DemoEnd.TERMINATED:
        return "demo stopped by SIGTERM; everything it started is stopped."
    return "demo failed; everything it started is stopped."


class _Progress:
    """The demo's progress while it waits for a part: one line drawn again on a terminal, a
    plain line every few seconds elsewhere (`sparkiq.core.statusline`)."""

    def __init__(self) -> None:
        self._line = StatusLine(live=sys.stdout.isatty())

    def show(self, text: str) -> None:
        click.echo(self._line.show(f"    {text}", time.monotonic()), nl=False)

    def end(self) -> None:
        """The last state stays on a line of its own."""
        click.echo(self._line.end(), nl=False)


class InvoiceFeed:
    """A thread writing invoices to the source topic: a backlog first, then a steady rate."""

    def __init__(self, bootstrap: str, *, rate_per_s: float, backlog: int, seed: int = 1) -> None:
        self.bootstrap = bootstrap
        self.rate_per_s = rate_per_s
        self.backlog = backlog
        self.generator = InvoiceGenerator(seed)
        self.written = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="invoice-feed", daemon=True)

    def start(self) -> InvoiceFeed:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _count(self, n: int) -> None:
        self.written += 1

    def _run(self) -> None:
        try:
            step_ms = 50
            start_ms = int(time.time() * 1000) - self.backlog * step_ms
            backlog = self.generator.invoices(self.backlog, start_ms=start_ms, step_ms=step_ms)
            produce_invoices(self.bootstrap, SOURCE, backlog, on_record=self._count)
            live: Iterator[Invoice] = (
                self.generator.invoice(int(time.time() * 1000)) for _ in itertools.count()
            )
            produce_invoices(
                self.bootstrap,
                SOURCE,
                live,
                rate_per_s=self.rate_per_s,
                on_record=self._count,
                stop=self._stop.is_set,
            )
        except BaseException as exc:  # reported by the demo's main loop
            self.error = exc


def run_demo(
    *,
    nodes: int = 3,
    duration_s: float | None = None,
    base_dir: Path | None = None,
    rate_per_s: float = 50.0,
    backlog: int = 2_000,
    broker: str = "kafka",
) -> None:
    own_dir = base_dir is None
    work = Path(tempfile.mkdtemp(prefix="sparkiq-demo-")) if base_dir is None else base_dir
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    end = DemoEnd.FAILED
    try:
        end = run_to_its_end(
            lambda: _run(work, started, nodes, duration_s, rate_per_s, backlog, broker)
        )
    finally:
        click.echo(last_words(end, duration_s))
    if own_dir:
        shutil.rmtree(work, ignore_errors=True)


def run_to_its_end(run: Callable[[], None]) -> DemoEnd:
    """Call `run` with SIGTERM taken as Ctrl-C (`sigterm_as_interrupt`), and say how it
    ended: it returned (its --duration ran out), Ctrl-C, or SIGTERM. A failure goes through."""
    try:
        with sigterm_as_interrupt():
            run()
    except Terminated:
        return DemoEnd.TERMINATED
    except KeyboardInterrupt:
        return DemoEnd.INTERRUPTED
    return DemoEnd.DURATION


def _run(
    work: Path,
    started: float,
    nodes: int,
    duration_s: float | None,
    rate_per_s: float,
    backlog: int,
    broker: str,
) -> None:
    """The demo until `duration_s` ran out (None: never); a KeyboardInterrupt (Ctrl-C, or
    SIGTERM as `Terminated`) or a failure goes through, once everything is stopped."""
    kafka = make_broker(broker, data_dir=work / "broker", progress=_step)
    with kafka:
        bootstrap = kafka.bootstrap_servers
        _step(f"{kafka.describe()}; logs and state in {work}")
        create_topic(bootstrap, SOURCE, SOURCE_PARTITIONS)
        feed = InvoiceFeed(bootstrap, rate_per_s=rate_per_s, backlog=backlog)
        pipeline = PipelineProcess(
            pipeline_file=Path(pos_pipeline.__file__),
            bootstrap_servers=bootstrap,
            checkpoint_dir=work / "checkpoints",
            log_path=work / "pipeline.log",
            extra_args=[
                "--trigger",
                "realtime",
                "--kafka-connector",
                spark_connector_for(broker),
            ],
        )
        cluster = LocalCluster(bootstrap, work / "nodes", nodes=nodes)
        try:
            _step(
                f"generator: {backlog} invoices now, then {rate_per_s:g} per second to '{SOURCE}'"
            )
            feed.start()
            _step(f"Spark pipeline: sparkiq run {pipeline.pipeline_file}")
            pipeline.start()
            click.echo(f"    pid {pipeline.pid}, log {pipeline.log_path}")
            _wait_for_queries(pipeline)
            _step(f"starting {nodes} serving nodes")
            cluster.start()
            _wait_until_serving(bootstrap, feed, pipeline, cluster, backlog)
            _step(f"ready in {time.monotonic() - started:.0f}s")
            _print_examples(cluster, bootstrap, feed)
            _print_freshness(cluster, bootstrap, pipeline, rate_per_s)
            click.echo(f"\n{how_it_ends(duration_s)}")
            sys.stdout.flush()
            _run_until_stopped(feed, pipeline, duration_s)
        except KeyboardInterrupt:
            click.echo()  # after the ^C a terminal shows
            raise
        finally:
            _step("stopping the generator, the pipeline, the nodes and the broker")
            feed.stop()
            pipeline.stop()
            cluster.stop()


def _check_alive(pipeline: PipelineProcess, feed: InvoiceFeed | None = None) -> None:
    """Fail the demo, naming the culprit, when the generator or the pipeline has stopped."""
    if feed is not None and feed.error is not None:
        raise SparkiqError(f"the invoice generator failed: {feed.error}")
    if not pipeline.is_running():
        raise SparkiqError(
            f"the pipeline exited with code {pipeline.exit_code()}; see {pipeline.log_path}"
        )


def _wait_for_queries(pipeline: PipelineProcess, timeout_s: float = 600.0) -> None:
    """Progress while Spark starts the queries, one by one, each with a first micro-batch.

    The nodes start after that: on 2 cores, Spark's start-up is the heavy part.
    """
    deadline = time.monotonic() + timeout_s
    began = time.monotonic()
    progress = _Progress()
    try:
        while not pipeline.running():
            _check_alive(pipeline)
            if time.monotonic() > deadline:
                raise SparkiqError(f"the pipeline did not start within {timeout_s:.0f}s")
            status = pipeline.status() or {}
            started = [
                q["name"] + ("" if q.get("batch") is not None else " (first batch)")
                for q in status.get("queries", [])
            ]
            shown = ", ".join(started) if started else "starting Spark"
            progress.show(f"{time.monotonic() - began:4.0f}s  queries: {shown}")
            time.sleep(1.0)
    finally:
        progress.end()


def _processed(pipeline: PipelineProcess) -> int:
    """Invoices the slowest query of the pipeline has processed."""
    counts = [sum((offsets or {}).get(SOURCE, {}).values()) for offsets in pipeline.processed()]
    return min(counts) if counts else 0


def _tables_ready(url: str) -> bool:
    try:
        names = {t["name"] for t in httpx.get(f"{url}/v1/tables", timeout=2).json()["tables"]}
        ready = httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except (httpx.HTTPError, ValueError, KeyError):
        return False
    return ready and set(TABLES) <= names


def _wait_until_serving(
    bootstrap: str,
    feed: InvoiceFeed,
    pipeline: PipelineProcess,
    cluster: LocalCluster,
    backlog: int,
    timeout_s: float = 900.0,
) -> None:
    """Progress lines until the pipeline has processed the backlog and the nodes serve it."""
    deadline = time.monotonic() + timeout_s
    tps = [(SOURCE, p) for p in range(SOURCE_PARTITIONS)]
    progress = _Progress()
    try:
        while True:
            _check_alive(pipeline, feed)
            status = pipeline.status()
            queries = len(status["queries"]) if status else 0
            processed = _processed(pipeline)
            in_topic = sum(true_end_offsets(bootstrap, tps).values())
            ready = sum(1 for node in cluster.nodes if node.is_ready())
            progress.show(
                f"generated {feed.written:>6}  pipeline: {queries} queries, processed "
                f"{processed:>6}/{in_topic:<6} nodes ready {ready}/{len(cluster.nodes)}"
            )
            if (
                processed >= backlog
                and ready == len(cluster.nodes)
                and _tables_ready(cluster.urls[0])
            ):
                return
            if time.monotonic() > deadline:
                raise SparkiqError(
                    f"the demo did not come up within {timeout_s:.0f}s; see {pipeline.log_path}"
                )
            time.sleep(1.0)
    finally:
        progress.end()


def _print_examples(cluster: LocalCluster, bootstrap: str, feed: InvoiceFeed) -> None:
    urls = cluster.urls
    gen = feed.generator
    prime = next(c.card_no for c in gen.customers if c.kind == "PRIME")
    customer = gen.customers[0].card_no
    store = gen.stores[0]
    click.echo(f"\nconsole (open it in a browser; any node serves it): {urls[0]}/ui/")
    sales = f"{urls[0]}/ui/tables/store-sales/keys/{quote(store)}"
    click.echo(f"    a store's sales per minute: {sales}")
    click.echo(f"    the pipeline's queries: {urls[0]}/ui/pipeline")
    click.echo("\nnodes (any node answers any key):")
    for url in urls:
        click.echo(f"    {url}")
    examples = [
        f"{urls[0]}/v1/tables/rewards/keys/{prime}",
        f"{urls[-1]}/v1/tables/latest-invoice/keys/{customer}",
        f"{urls[1 % len(urls)]}/v1/tables/store-sales/keys/{quote(store)}/windows",
        f"{urls[-1]}/v1/tables/stores/keys/{quote(store)}",  # global: every node answers itself
        f"{urls[0]}/v1/tables/store-sales/windows?from=-15m&order=desc&limit=5",
        f"{urls[0]}/v1/tables/rewards/keys/{prime}/owner",
        f"{urls[0]}/v1/tables/rewards/range?limit=5",
        f"{urls[0]}/v1/tables",
        f"{urls[0]}/v1/metadata",
    ]
    click.echo("\ntry:")
    for ex in examples:
        click.echo(f"    curl -s '{ex}'")
    click.echo(
        f"    curl -s -X POST {urls[1 % len(urls)]}/v1/tables/rewards/multi-get "
        f'-d \'{{"keys": ["{prime}", "{customer}"]}}\''
    )
    click.echo(f"    curl -sN '{urls[1 % len(urls)]}/v1/tables/rewards/keys/{prime}/watch'")
    click.echo(f"    .venv/bin/sparkiq get rewards {prime} --url {urls[-1]}")
    click.echo(f"    .venv/bin/sparkiq watch rewards {prime} --url {urls[0]}")
    click.echo(f"    .venv/bin/sparkiq cluster --url {urls[0]}")
    click.echo(f"    topics: pos, shipments, loyalty, hadoop-sink, pos-dead-letter on {bootstrap}")
    click.echo("\nfor example:")
    for ex in examples[:4]:
        body = httpx.get(ex, timeout=10).text
        if len(body) > 300:
            body = body[:300] + "..."
        click.echo(f"    GET {ex}\n      -> {body}")
    _read_your_write(urls[-1], bootstrap)


def _print_freshness(
    cluster: LocalCluster, bootstrap: str, pipeline: PipelineProcess, rate_per_s: float
) -> None:
    """How each query runs, and the freshness measured now (`sparkiq.dev.freshness`)."""
    queries = (pipeline.status() or {}).get("queries", [])
    modes = ", ".join(f"{q['name']} {_MODE_WORDS.get(q.get('trigger'), '?')}" for q in queries)
    click.echo(f"\nthe pipeline's queries: {modes} (its log says why: {pipeline.log_path})")
    click.echo(
        f"freshness, measured now over {FRESHNESS_PROBES} invoices (the generator's "
        f"{rate_per_s:g}/s going on):"
    )
    measured = measure_freshness(
        bootstrap,
        cluster.urls[0],
        source=SOURCE,
        routes_topic=pos_pipeline.DEFAULT_TOPICS["hadoop"],
        probes=FRESHNESS_PROBES,
    )
    for line in measured.lines():
        click.echo(f"    {line}")


def _read_your_write(url: str, bootstrap: str) -> None:
    """Produce one invoice of a PRIME customer and read its reward back at once with
    `after_source`: the answer waits for the pipeline and includes the invoice."""
    invoice = next(
        inv
        for inv in InvoiceGenerator(seed=int(time.time())).invoices(
            1_000, start_ms=int(time.time() * 1000)
        )
        if inv["CustomerType"] == "PRIME" and points_for(inv) > 0
    )
    card = quote(str(invoice["CustomerCardNo"]))
    partition, offset = produce_one(bootstrap, SOURCE, invoice)
    ex = f"{url}/v1/tables/rewards/keys/{card}?after_source={SOURCE}:{partition}:{offset}"
    click.echo(
        f"\nread your own write: invoice {invoice['InvoiceNumber']} ({points_for(invoice)} "
        f"points for card {card}) went to {SOURCE}:{partition}:{offset}; the read waits until "
        "the pipeline has committed it:"
    )
    started = time.monotonic()
    answer = httpx.get(ex, timeout=30)
    while answer.status_code == 503 and time.monotonic() - started < 60:
        answer = httpx.get(ex, timeout=30)  # not committed within one budget: ask again
    click.echo(f"    GET {ex}\n      -> {answer.text[:300]}  ({time.monotonic() - started:.1f}s)")


def _run_until_stopped(
    feed: InvoiceFeed, pipeline: PipelineProcess, duration_s: float | None
) -> None:
    deadline = None if duration_s is None else time.monotonic() + duration_s
    last_report = time.monotonic()
    while deadline is None or time.monotonic() < deadline:
        _check_alive(pipeline, feed)
        if time.monotonic() - last_report >= 30:
            last_report = time.monotonic()
            click.echo(f"    {feed.written} invoices generated, {_processed(pipeline)} processed")
        time.sleep(0.5)
