"""The progress topics: what each table's pipeline has committed, and how each query runs.

The progress of application ``<app>`` is the single-partition topic ``<app>.progress``
(compacted: each table's last record is enough for a node that starts; a running node keeps
the recent ones). A pipeline run by `sparkiq run` publishes one record per committed
micro-batch of each table's query (`ProgressPublisher`): key the table's name, value a
`BatchProgress` (the source offsets the batch read up to, and the end of the table's
changelog once it was written). Every serving node follows the topic (`ProgressFollower`)
into a `PipelineProgress`, which turns `after_source=TOPIC:PARTITION:OFFSET` into the
changelog positions a replica must have reached.

The figures of every query's micro-batches (`QueryBatch`: rates, duration, state rows, dead
letters; for the console's pipeline page) go to a topic of their own, ``<app>.queries``
(single partition, compacted, key the query's name), which the same follower reads: a node
of an earlier version never sees a record it cannot parse, and a pipeline of an earlier
version simply publishes none.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from sparkiq.core.progress import BadProgress, BatchProgress, PipelineProgress, QueryBatch
from sparkiq.core.tables import TableDef
from sparkiq.kafka.admin import create_topic, topic_exists
from sparkiq.kafka.catalog import DEFAULT_APP
from sparkiq.kafka.clientlog import LOG_CONF
from sparkiq.kafka.consumers import says_nothing_wrong
from sparkiq.kafka.offsets import (
    FOLLOWING_FETCH_BYTES,
    TopicPartitionKey,
    ends_from,
    probe_consumer,
)
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity

__all__ = [
    "ProgressFollower",
    "ProgressPublisher",
    "ensure_progress_topic",
    "progress_topic",
    "queries_topic",
]

log = logging.getLogger(__name__)

_PARTITION = 0
_TOPIC_CONFIG = {"cleanup.policy": "compact"}
# A follower idles on every node; a committed batch reaches the nodes within this.
_FOLLOW_FETCH_WAIT_MS = 100


def progress_topic(app: str = DEFAULT_APP) -> str:
    """Name of the progress topic of application *app*."""
    return f"{app}.progress"


def queries_topic(app: str = DEFAULT_APP) -> str:
    """Name of the topic of the per-query figures of application *app*."""
    return f"{app}.queries"


def ensure_progress_topic(
    bootstrap: str, *, app: str = DEFAULT_APP, security: KafkaSecurity = PLAINTEXT
) -> str:
    """Create the progress topic and the queries topic if they do not exist yet; returns the
    progress topic's name."""
    topic = progress_topic(app)
    # Look before creating: a serving node finds them made by the pipeline, and may lack
    # the right to create topics (CreateTopics is refused even for one that exists).
    for name in (topic, queries_topic(app)):
        if not topic_exists(bootstrap, name, security=security):
            create_topic(bootstrap, name, 1, config=_TOPIC_CONFIG, exist_ok=True, security=security)
    return topic


# What the publisher's thread is given: a table's committed batch (table, batch id, sources
# read up to), or a query's figures.
_Item = tuple[str, int, dict[tuple[str, int], int]] | QueryBatch


class ProgressPublisher:
    """Publishes each committed batch of a table's query (the pipeline's side).

    `batch_done` only queues (it is called from Spark's listener thread); a thread of its
    own measures the changelog's end -- after the batch committed, so every record the
    batch wrote is before it -- and produces the record.
    """

    def __init__(
        self,
        bootstrap: str,
        table_of: Callable[[str], TableDef | None],
        *,
        app: str = DEFAULT_APP,
        security: KafkaSecurity = PLAINTEXT,
    ) -> None:
        self._bootstrap = bootstrap
        self._table_of = table_of
        self._security = security
        self.topic = ensure_progress_topic(bootstrap, app=app, security=security)
        self.queries_topic = queries_topic(app)
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 0,
                **security.librdkafka_conf(),
                **LOG_CONF,
            }
        )
        self._queue: queue.Queue[_Item | None] = queue.Queue()
        # The changelog ends published last, the start of the next measurement (`_publish`).
        self._ends: dict[TopicPartitionKey, int] = {}
        self._read_to: dict[str, dict[TopicPartitionKey, int]] = {}  # per table: its sources
        self._thread = threading.Thread(target=self._run, name="sparkiq-progress", daemon=True)
        self._thread.start()
        self.published = 0  # tables' batch records
        self.published_queries = 0  # queries' figures

    def batch_done(
        self, table_name: str, batch: int, sources: Mapping[str, Mapping[str, int]]
    ) -> None:
        """Batch `batch` of `table_name`'s query committed, having read up to `sources`
        (topic -> partition -> next offset, as Spark reports a Kafka source's end)."""
        ends = {(t, int(p)): int(o) for t, parts in sources.items() for p, o in parts.items()}
        self._queue.put((table_name, batch, ends))

    def query_done(self, figures: QueryBatch) -> None:
        """A micro-batch of a query (any query, a table's or not) finished: publish its
        figures (from Spark's listener thread too: this only queues)."""
        self._queue.put(figures)

    def close(self, timeout_s: float = 10.0) -> None:
        """Publish what is queued, then stop."""
        self._queue.put(None)
        self._thread.join(timeout_s)
        self._producer.flush(timeout_s)

    def _run(self) -> None:
        # One consumer measures every batch's changelog end: one connection for the run,
        # not a new one per micro-batch.
        probe = probe_consumer(
            self._bootstrap, self._security, max_partition_fetch_bytes=FOLLOWING_FETCH_BYTES
        )
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    return
                try:
                    if isinstance(item, QueryBatch):
                        self._publish_query(item)
                    else:
                        self._publish(probe, *item)
                except Exception as exc:  # progress is best effort: the pipeline goes on
                    name, batch = (
                        (item.query, item.batch) if isinstance(item, QueryBatch) else item[:2]
                    )
                    log.warning("progress of %r batch %d not published: %s", name, batch, exc)
        finally:
            probe.close()

    def _publish(
        self, probe: Consumer, name: str, batch: int, sources: dict[tuple[str, int], int]
    ) -> None:
        table = self._table_of(name)
        if table is None:
            log.warning("progress: table %r is not in the catalog; batch %d skipped", name, batch)
            return
        tps = [(table.topic, p) for p in range(table.partitions)]
        # On Apache Kafka the ends are one ListOffsets (`ends_from`). On the dev broker:
        # after a micro-batch of a few records, one fetch per partition from the ends
        # published last tells the end now (`ends_after`). Otherwise (the first time, a large
        # batch, a partition that does not answer) the end is read from the watermarks and
        # the last batch (`true_end_offsets`). Both are exact; the choice is the dev broker's
        # costs, which list every batch of the partition for a ListOffsets and for a fetch
        # below the end, and a table's changelog grows by a batch per partition and
        # micro-batch. On changelogs of 1,500 batches per partition, for the three tables of
        # the point-of-sale query, 6 partitions each: 24-31 ms of the broker's CPU per
        # micro-batch of a few records this way, against 54-61 ms (the broker at 50 invoices
        # a second: 0.32-0.46 core against 0.39-0.47); but 89-139 ms against 59-97 ms when
        # each partition got 1,000 records, as the fetch from the old end copies records to
        # throw away.
        read = _records_read(self._read_to.get(name), sources)
        self._read_to[name] = dict(sources)
        following = read is not None and read <= FOLLOW_MAX_RECORDS
        ends = ends_from(
            probe,
            self._bootstrap,
            tps,
            self._ends if following else {},
            security=self._security,
        )
        self._ends.update(ends)
        changelog = {p: ends[(table.topic, p)] for p in range(table.partitions)}
        record = BatchProgress(name, batch, sources, changelog, _now_ms())
        self._producer.produce(
            self.topic, key=name.encode(), value=record.to_json(), partition=_PARTITION
        )
        self._producer.poll(0)
        self.published += 1

    def _publish_query(self, figures: QueryBatch) -> None:
        self._producer.produce(
            self.queries_topic,
            key=figures.query.encode(),
            value=figures.to_json(),
            partition=_PARTITION,
        )
        self._producer.poll(0)
        self.published_queries += 1


# A table's micro-batch that read at most this many records has its changelog's end found
# from the end published before (`ProgressPublisher._publish`).
FOLLOW_MAX_RECORDS = 1_000


def _records_read(
    before: Mapping[TopicPartitionKey, int] | None, after: Mapping[TopicPartitionKey, int]
) -> int | None:
    """Records between two positions of a query's sources (None: no position before)."""
    if before is None:
        return None
    return sum(max(offset - before.get(tp, 0), 0) for tp, offset in after.items())


class ProgressFollower:
    """Follows the progress topic and the queries topic into `progress` in a thread (a
    serving node's side)."""

    def __init__(
        self,
        bootstrap: str,
        *,
        app: str = DEFAULT_APP,
        security: KafkaSecurity = PLAINTEXT,
        progress: PipelineProgress | None = None,
    ) -> None:
        self._bootstrap = bootstrap
        self._app = app
        self._security = security
        self.topic = progress_topic(app)
        self.queries_topic = queries_topic(app)
        self.progress = progress if progress is not None else PipelineProgress()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Create the topics if needed and start following them from their beginning."""
        if self._thread is not None:
            return
        ensure_progress_topic(self._bootstrap, app=self._app, security=self._security)
        self._stopping.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"sparkiq-progress-{self._app}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self._bootstrap,
                # Required by librdkafka, never joined: the consumer only uses assign().
                "group.id": f"sparkiq-progress-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": _FOLLOW_FETCH_WAIT_MS,
                **self._security.librdkafka_conf(),
                **LOG_CONF,
            }
        )
        try:
            consumer.assign(
                [
                    CTopicPartition(topic, _PARTITION, OFFSET_BEGINNING)
                    for topic in (self.topic, self.queries_topic)
                ]
            )
            while not self._stopping.is_set():
                try:
                    batch = consumer.consume(num_messages=1000, timeout=0.2)
                except KafkaException as exc:
                    log.warning("progress %s: %s; retrying", self.topic, exc)
                    self._stopping.wait(1.0)
                    continue
                for msg in batch:
                    err = msg.error()
                    if err is not None:
                        if not says_nothing_wrong(err):
                            log.warning("progress %s: consumer error %s", self.topic, err.str())
                        continue
                    value = msg.value()
                    if value is None:
                        continue
                    try:
                        if msg.topic() == self.queries_topic:
                            self.progress.add_query(QueryBatch.from_json(value))
                        else:
                            self.progress.add(BatchProgress.from_json(value))
                    except BadProgress as exc:
                        log.warning("progress %s offset %s: %s", msg.topic(), msg.offset(), exc)
        finally:
            consumer.close()


def _now_ms() -> int:
    return int(time.time() * 1000)
