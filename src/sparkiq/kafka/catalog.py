"""Catalog topic I/O: register and drop table definitions, read them all, follow changes.

The catalog of application ``<app>`` is the compacted, single-partition topic
``<app>.catalog``. Each record's key is a table name (UTF-8) and its value the table's
`TableDef.to_json()`; a null value (tombstone) drops the table. The last record per name
wins, so registering again replaces a definition. Pipelines write it (`register_table`,
the CLI, `materialize`); every serving node reads it whole at start (`read_catalog`, or
`CatalogWatcher.start`) and then follows it (`CatalogWatcher`).

One partition keeps every change in one total order; compaction keeps the topic as small
as the set of tables. The topic is created on first use by any of the functions here.

Reads go to the *true* end of the partition (`sparkiq.kafka.offsets.true_end_offsets`):
the dev broker under-reports the end offset, and a reader trusting it would miss the most
recently registered tables. Records that are not valid definitions are skipped with a
warning, so one bad writer cannot stop every node from starting.

Every function takes the Kafka client security settings (`KafkaSecurity`, default
PLAINTEXT) that its clients connect with.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, Producer
from confluent_kafka import KafkaError as CKafkaError
from confluent_kafka import TopicPartition as CTopicPartition

from sparkiq.core.errors import CatalogError, KafkaError, SparkiqError, TopicNotFoundError
from sparkiq.core.tables import TableDef
from sparkiq.kafka.admin import ClientErrors, admin_client, create_topic, metadata_of
from sparkiq.kafka.brokerstate import BrokerWatch, watch_conf
from sparkiq.kafka.clientlog import LOG_CONF
from sparkiq.kafka.consumers import says_nothing_wrong
from sparkiq.kafka.offsets import true_end_offsets
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity

__all__ = [
    "DEFAULT_APP",
    "CatalogWatcher",
    "catalog_topic",
    "drop_table",
    "ensure_catalog_topic",
    "read_catalog",
    "read_catalog_into",
    "register_table",
]

log = logging.getLogger(__name__)

DEFAULT_APP = "sparkiq"
_PARTITION = 0
_TOPIC_CONFIG = {"cleanup.policy": "compact"}
# A one-off read waits on the broker's empty fetch at the end: keep that wait short.
_READ_FETCH_WAIT_MS = 10
# A watcher idles on every node: one empty fetch per 200 ms is cheap, and a new table
# still reaches every node well within a second.
_FOLLOW_FETCH_WAIT_MS = 200


def catalog_topic(app: str = DEFAULT_APP) -> str:
    """Name of the catalog topic of application *app*."""
    return f"{app}.catalog"


def ensure_catalog_topic(
    bootstrap: str,
    *,
    app: str = DEFAULT_APP,
    timeout_s: float = 10.0,
    security: KafkaSecurity = PLAINTEXT,
) -> str:
    """Create the catalog topic if it does not exist yet; returns its name."""
    topic = catalog_topic(app)
    # Look before creating: almost every call finds the topic, and a metadata look-up is
    # cheaper than a refused CreateTopics (whose error also keeps its admin client alive
    # in a reference cycle until the next garbage collection).
    if _existing_partition_count(bootstrap, topic, timeout_s, security) is None:
        create_topic(
            bootstrap,
            topic,
            1,
            config=_TOPIC_CONFIG,
            exist_ok=True,
            timeout_s=timeout_s,
            security=security,
        )
    return topic


# ---- writing --------------------------------------------------------------------------


def register_table(
    bootstrap: str,
    table: TableDef,
    *,
    app: str = DEFAULT_APP,
    timeout_s: float = 10.0,
    security: KafkaSecurity = PLAINTEXT,
) -> None:
    """Publish *table* in the catalog of *app*, replacing any definition of that name.

    The changelog topic must exist with exactly ``table.partitions`` partitions: a node that
    assumed another count would send lookups to the wrong partitions.
    """
    actual = _existing_partition_count(bootstrap, table.topic, timeout_s, security)
    if actual is None:
        raise TopicNotFoundError(
            f"cannot register table {table.name!r}: its changelog topic {table.topic!r} does "
            f"not exist on {bootstrap}; create it with {table.partitions} partitions first "
            "(or let the pipeline that writes it create it)"
        )
    if actual != table.partitions:
        raise CatalogError(
            f"cannot register table {table.name!r}: topic {table.topic!r} has {actual} "
            f"partitions but the definition says {table.partitions}; register it with "
            f"partitions={actual}"
        )
    _publish(bootstrap, app, table.name, table.to_json(), timeout_s, security)
    log.info("catalog %s: registered table %r (topic %r)", app, table.name, table.topic)


def _existing_partition_count(
    bootstrap: str, topic: str, timeout_s: float, security: KafkaSecurity
) -> int | None:
    """Partition count of *topic*, or None if it does not exist.

    A metadata request for one named topic makes brokers with auto-creation on (the dev
    broker, Kafka's default) create it with a default partition count, which would turn
    a missing changelog topic into a wrongly sized one. This request asks them not to.
    """
    errors = ClientErrors()
    admin = admin_client(
        bootstrap, {"allow.auto.create.topics": "false"}, security=security, errors=errors
    )
    try:
        md = metadata_of(admin, topic, timeout_s, errors)
    except KafkaException as exc:
        raise KafkaError(
            f"cannot read metadata of topic {topic!r} from {bootstrap}: {exc}"
            f"{errors.hint(admin, security)}; check that the brokers are reachable and "
            "that the Kafka security settings (--kafka-config, --kafka-property) are the "
            "cluster's"
        ) from exc
    info = md.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        return None
    return len(info.partitions)


def drop_table(
    bootstrap: str,
    name: str,
    *,
    app: str = DEFAULT_APP,
    timeout_s: float = 10.0,
    security: KafkaSecurity = PLAINTEXT,
) -> None:
    """Remove table *name* from the catalog of *app* (a tombstone); its topic is untouched."""
    _publish(bootstrap, app, name, None, timeout_s, security)
    log.info("catalog %s: dropped table %r", app, name)


def _publish(
    bootstrap: str,
    app: str,
    name: str,
    value: bytes | None,
    timeout_s: float,
    security: KafkaSecurity,
) -> None:
    topic = ensure_catalog_topic(bootstrap, app=app, timeout_s=timeout_s, security=security)
    failures: list[str] = []

    def on_delivery(err: CKafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err.str())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            # One record, sent at once; acks from all replicas so a node restarting right
            # after cannot read a catalog that lacks it.
            "linger.ms": 0,
            "acks": "all",
            "enable.idempotence": False,
            "message.timeout.ms": int(timeout_s * 1000),
            **security.librdkafka_conf(),
            **LOG_CONF,
        }
    )
    try:
        producer.produce(
            topic, key=name.encode(), value=value, partition=_PARTITION, on_delivery=on_delivery
        )
    except (KafkaException, BufferError) as exc:
        raise KafkaError(f"cannot write to catalog topic {topic!r}: {exc}") from exc
    remaining = producer.flush(timeout_s)
    if remaining or failures:
        reason = failures[0] if failures else f"not acknowledged within {timeout_s:g}s"
        raise KafkaError(
            f"catalog topic {topic!r} on {bootstrap} did not take the record for table "
            f"{name!r}: {reason}; check that the brokers are reachable and retry"
        )


# ---- reading --------------------------------------------------------------------------


def _apply(tables: dict[str, TableDef], msg: Message) -> bool:
    """Apply one catalog record to *tables*; returns whether anything changed."""
    key = msg.key()
    if key is None:
        log.warning("catalog record at offset %s has no key; skipped", msg.offset())
        return False
    try:
        name = key.decode("utf-8")
    except UnicodeDecodeError:
        log.warning("catalog record at offset %s: key is not UTF-8; skipped", msg.offset())
        return False
    value = msg.value()
    if value is None:
        return tables.pop(name, None) is not None
    try:
        table = TableDef.from_json(value)
    except SparkiqError as exc:
        log.warning(
            "catalog record for %r at offset %s is not a valid table definition (%s); "
            "skipped: register the table again to fix it",
            name,
            msg.offset(),
            exc,
        )
        return False
    if table.name != name:
        log.warning(
            "catalog record at offset %s is keyed %r but defines table %r; skipped",
            msg.offset(),
            name,
            table.name,
        )
        return False
    if tables.get(name) == table:
        return False
    tables[name] = table
    return True


def _catalog_consumer(
    bootstrap: str,
    *,
    fetch_wait_ms: int,
    security: KafkaSecurity,
    watch: BrokerWatch | None = None,
) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            # Required by librdkafka, never joined: the consumer only uses assign().
            "group.id": f"sparkiq-catalog-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": fetch_wait_ms,
            **security.librdkafka_conf(),
            **LOG_CONF,
            **(watch_conf(watch) if watch is not None else {}),
        }
    )


def _read_to(
    consumer: Consumer,
    topic: str,
    tables: dict[str, TableDef],
    end: int,
    timeout_s: float,
) -> None:
    """Read from the consumer's assigned position until *end*, applying every record."""
    if end <= 0:
        return
    position = -1
    deadline = time.monotonic() + timeout_s
    while position + 1 < end:
        if time.monotonic() >= deadline:
            raise KafkaError(
                f"reading catalog topic {topic!r} stopped at offset {position + 1} of {end} "
                f"after {timeout_s:g}s; check that the broker is reachable and retry"
            )
        # consume() waits for the whole batch or the timeout: ask for no more than the
        # records still missing so it returns as soon as they are here.
        wanted = min(10_000, end - position - 1)
        for msg in consumer.consume(num_messages=wanted, timeout=0.2):
            err = msg.error()
            if err is not None:
                if not says_nothing_wrong(err):
                    log.warning("catalog %s: consumer error %s", topic, err.str())
                continue
            _apply(tables, msg)
            position = max(position, msg.offset() or 0)


def read_catalog(
    bootstrap: str,
    *,
    app: str = DEFAULT_APP,
    timeout_s: float = 10.0,
    security: KafkaSecurity = PLAINTEXT,
) -> dict[str, TableDef]:
    """Every table registered in the catalog of *app*, read to its true end."""
    topic = ensure_catalog_topic(bootstrap, app=app, timeout_s=timeout_s, security=security)
    tables: dict[str, TableDef] = {}
    read_catalog_into(bootstrap, topic, tables, timeout_s, security=security)
    return tables


def read_catalog_into(
    bootstrap: str,
    topic: str,
    tables: dict[str, TableDef],
    timeout_s: float = 10.0,
    *,
    security: KafkaSecurity = PLAINTEXT,
) -> int:
    """Apply every record of catalog *topic* to *tables*; returns the true end offset read to."""
    consumer = _catalog_consumer(bootstrap, fetch_wait_ms=_READ_FETCH_WAIT_MS, security=security)
    try:
        tp = (topic, _PARTITION)
        end = true_end_offsets(
            bootstrap, [tp], timeout_s=timeout_s, consumer=consumer, security=security
        )[tp]
        consumer.assign([CTopicPartition(topic, _PARTITION, OFFSET_BEGINNING)])
        _read_to(consumer, topic, tables, end, timeout_s)
        return end
    finally:
        consumer.close()


# ---- following ------------------------------------------------------------------------


class CatalogWatcher:
    """Follows the catalog of *app* in a thread and reports every change.

    `start()` returns once the catalog has been read to its true end, so a node starts
    knowing every registered table; `tables()` is the current catalog. `on_change` gets the
    whole catalog (a fresh dict) from the watcher thread: once after the initial read if it
    found tables, then after each batch of records that changed something. Callers on an
    event loop hop over with ``loop.call_soon_threadsafe``. *watch* hears whether the brokers
    answer (`sparkiq.kafka.brokerstate`): the watcher polls its consumer all the time, on
    every node, whatever the node holds.
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        app: str = DEFAULT_APP,
        on_change: Callable[[dict[str, TableDef]], None] | None = None,
        poll_timeout_s: float = 0.2,
        start_timeout_s: float = 30.0,
        security: KafkaSecurity = PLAINTEXT,
        watch: BrokerWatch | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self._watch = watch
        self.security = security
        self.app = app
        self.topic = catalog_topic(app)
        self._on_change = on_change
        self._poll_timeout_s = poll_timeout_s
        self._start_timeout_s = start_timeout_s
        self._tables: dict[str, TableDef] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def tables(self) -> dict[str, TableDef]:
        """The catalog as last read (a copy)."""
        with self._lock:
            return dict(self._tables)

    def start(self) -> None:
        """Start following; returns after the initial catalog has been read to its true end."""
        if self._thread is not None:
            return
        ensure_catalog_topic(self.bootstrap, app=self.app, security=self.security)
        self._stopping.clear()
        self._ready.clear()
        self._startup_error = None
        thread = threading.Thread(target=self._run, name=f"sparkiq-catalog-{self.app}", daemon=True)
        self._thread = thread
        thread.start()
        if not self._ready.wait(self._start_timeout_s):
            self.stop()
            raise KafkaError(
                f"catalog topic {self.topic!r} on {self.bootstrap} was not read within "
                f"{self._start_timeout_s:g}s (connecting with {self.security.summary}); "
                "check that the broker is reachable"
            )
        if self._startup_error is not None:
            error = self._startup_error
            self.stop()
            raise error

    def stop(self) -> None:
        """Stop following and close the consumer; safe to call more than once."""
        self._stopping.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        initial: dict[str, TableDef] = {}
        try:
            # A short-waiting consumer for the initial read, so start() is quick; a patient
            # one to follow, so an idle watcher costs the broker little.
            end = read_catalog_into(
                self.bootstrap,
                self.topic,
                initial,
                self._start_timeout_s,
                security=self.security,
            )
            consumer = _catalog_consumer(
                self.bootstrap,
                fetch_wait_ms=_FOLLOW_FETCH_WAIT_MS,
                security=self.security,
                watch=self._watch,
            )
        except BaseException as exc:  # reported to start(), which re-raises it
            self._startup_error = exc
            self._ready.set()
            return
        try:
            consumer.assign([CTopicPartition(self.topic, _PARTITION, end)])
            with self._lock:
                self._tables = dict(initial)
            self._ready.set()
            if initial:
                self._notify(initial)
            self._follow(consumer)
        finally:
            consumer.close()

    def _follow(self, consumer: Consumer) -> None:
        while not self._stopping.is_set():
            try:
                batch = consumer.consume(num_messages=1000, timeout=self._poll_timeout_s)
            except KafkaException as exc:
                log.warning("catalog %s: %s; retrying", self.topic, exc)
                self._stopping.wait(1.0)
                continue
            if batch:
                self._apply_batch(batch)

    def _apply_batch(self, batch: Iterable[Message]) -> None:
        with self._lock:
            tables = dict(self._tables)
        changed = False
        for msg in batch:
            err = msg.error()
            if err is not None:
                if not says_nothing_wrong(err):
                    log.warning("catalog %s: consumer error %s", self.topic, err.str())
                continue
            changed = _apply(tables, msg) or changed
        if changed:
            with self._lock:
                self._tables = tables
            self._notify(dict(tables))

    def _notify(self, tables: dict[str, TableDef]) -> None:
        if self._on_change is None:
            return
        try:
            self._on_change(tables)
        except Exception:
            # The watcher must keep following whatever a listener does.
            log.exception("catalog %s: on_change failed", self.topic)
