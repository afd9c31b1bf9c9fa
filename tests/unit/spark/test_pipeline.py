"""Loading pipeline files for `sparkiq run`: clear errors for files that cannot run, and for
sources and changelogs its principal has no right to on a secured cluster."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from sparkiq.core.errors import AccessDeniedError, ConfigError
from sparkiq.dev.acls import Grant
from sparkiq.kafka.rights import Operation, Resource
from sparkiq.kafka.roles import pipeline_needs
from sparkiq.spark.connector import KafkaConnector
from sparkiq.spark.materialize import define_table, prepare_table
from sparkiq.spark.pipeline import PipelineContext, load_pipeline
from sparkiq.spark.realtime import TriggerMode
from tests.support.secured import SecuredKafka, grants_for


def test_a_pipeline_file_gives_its_pipeline_function(tmp_path: Path) -> None:
    path = tmp_path / "mine.py"
    path.write_text(
        "def helper(x):\n    return x + 1\n\ndef pipeline(ctx):\n    return helper(1)\n"
    )
    fn = load_pipeline(path)
    assert fn(None) == 2  # type: ignore[arg-type, func-returns-value]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x = 1\n", "must define a function pipeline"),
        ("pipeline = 3\n", "must define a function pipeline"),
        ("def pipeline(ctx)\n", "failed to load"),
        ("import not_a_module_anywhere\n", "failed to load"),
    ],
)
def test_files_that_cannot_run_are_named_with_the_reason(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad.py"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_pipeline(path)


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_pipeline(tmp_path / "nope.py")


class FakeQuery:
    """What `PipelineContext._start` reads of a started query."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.isActive = True
        self.lastProgress: dict[str, object] | None = None


def test_a_query_that_stops_ends_the_wait_for_the_next_ones_first_batch(
    tmp_path: Path,
) -> None:
    ctx = PipelineContext(
        spark=cast(Any, None),
        bootstrap_servers="127.0.0.1:9",
        checkpoint_dir=tmp_path,
        app="t",
        init_wait_s=30.0,
    )
    first, second = FakeQuery("first"), FakeQuery("second")
    first.lastProgress = {"batchId": 0}
    assert ctx._start(lambda: first) is first  # its first batch is done: no wait
    first.isActive = False  # then it fails, while the next one is in its first batch
    started = time.monotonic()
    assert ctx._start(lambda: second) is second
    assert time.monotonic() - started < 5  # not the 30 s a first batch may take
    assert ctx.queries == [first, second]  # for the runner's watch, which fails or restarts


def test_checkpoints_on_shared_storage_are_urls_under_the_root() -> None:
    ctx = PipelineContext(
        spark=cast(Any, None), bootstrap_servers="b", checkpoint_dir="hdfs://nn:8020/ckpt/"
    )
    assert ctx.checkpoint("table store-sales") == "hdfs://nn:8020/ckpt/table_store-sales"
    local = PipelineContext(spark=cast(Any, None), bootstrap_servers="b", checkpoint_dir=Path("c"))
    assert local.checkpoint("customers") == "c/customers"


class FakeSpark:
    """Just enough of a SparkSession for `PipelineContext.read`: records the source's options."""

    def __init__(self) -> None:
        self.options_given: dict[str, str] = {}

    @property
    def readStream(self) -> FakeSpark:
        return self

    def format(self, name: str) -> FakeSpark:
        return self

    def options(self, **options: str) -> FakeSpark:
        self.options_given = dict(options)
        return self

    def load(self) -> dict[str, str]:
        return self.options_given


def test_a_read_may_cap_its_micro_batches_otherwise_than_the_context() -> None:
    spark = FakeSpark()
    ctx = PipelineContext(
        spark=cast(Any, spark),
        bootstrap_servers="b",
        checkpoint_dir="c",
        max_offsets_per_trigger=20,
    )
    assert cast(Any, ctx.read("pos"))["maxOffsetsPerTrigger"] == "20"
    assert cast(Any, ctx.read("pos", max_offsets_per_trigger=160))["maxOffsetsPerTrigger"] == "160"
    with pytest.raises(ConfigError, match="at least 1"):
        ctx.read("pos", max_offsets_per_trigger=0)
    uncapped = PipelineContext(spark=cast(Any, spark), bootstrap_servers="b", checkpoint_dir="c")
    assert "maxOffsetsPerTrigger" not in cast(Any, uncapped.read("pos"))


def test_only_reads_that_may_run_in_real_time_keep_kafka_s_fetch_wait() -> None:
    spark = FakeSpark()

    def ctx(mode: TriggerMode) -> PipelineContext:
        return PipelineContext(
            spark=cast(Any, spark),
            bootstrap_servers="b",
            checkpoint_dir="c",
            max_offsets_per_trigger=20,
            trigger_mode=mode,
            kafka_connector=KafkaConnector.BUILTIN,
        )

    wait = "kafka.fetch.max.wait.ms"
    assert cast(Any, ctx(TriggerMode.MICROBATCH).read("pos"))[wait] == "10"
    realtime = ctx(TriggerMode.REALTIME)
    assert wait not in cast(Any, realtime.read("pos"))  # uncapped: it may run in real time
    assert cast(Any, realtime.read("pos", max_offsets_per_trigger=5))[wait] == "10"


def test_a_source_the_pipeline_may_not_read_is_named_before_a_query_starts(
    secured_kafka: SecuredKafka, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    app = unique_name("pipe-acl")
    source = f"{app}.orders"
    secured_kafka.create_topic(source, 1)
    ctx = PipelineContext(
        spark=cast(Any, FakeSpark()),
        bootstrap_servers=secured_kafka.bootstrap,
        checkpoint_dir=tmp_path,
        app=app,
        kafka_security=secured_kafka.security("nobody"),
    )
    ctx.read(source)  # no query yet, no broker asked
    with pytest.raises(AccessDeniedError) as info:
        ctx.check_sources()  # what the start of a query does first
    assert str(info.value).startswith(
        f"cannot read the pipeline's sources: principal User:nobody may not READ topic {source} "
        "(TOPIC_AUTHORIZATION_FAILED) (needed to read the source)"
    )


def test_a_changelog_the_pipeline_may_not_write_is_named_before_a_query_starts(
    secured_kafka: SecuredKafka, unique_name: Callable[[str], str]
) -> None:
    app = unique_name("pipe-acl")
    table = define_table("t", partitions=1, app=app)
    secured_kafka.create_topic(table.topic, 1)
    # Everything else the pipeline needs, but WRITE on the changelog: READ only.
    needs = [n for n in pipeline_needs(app, (), (table.topic,)) if n.name != table.topic]
    secured_kafka.grant(
        "pipeline", [*grants_for(needs), Grant(Operation.READ, Resource.TOPIC, table.topic)]
    )
    with pytest.raises(AccessDeniedError) as info:
        prepare_table(
            secured_kafka.bootstrap, table, app=app, security=secured_kafka.security("pipeline")
        )
    assert f"principal User:pipeline may not WRITE topic {table.topic} " in str(info.value)
    assert "catalog" not in str(info.value)  # what it may do is not named


class RefusedQuery(FakeQuery):
    """A query Spark refused to run in Real-Time Mode as it started."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.isActive = False

    def exception(self) -> str:
        return (
            "[STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST] Streaming real-time "
            "mode has the following limitation: ...\n\tat org.apache.spark..."
        )


def test_a_query_spark_refuses_in_real_time_mode_runs_in_micro_batches(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = PipelineContext(spark=cast(Any, None), bootstrap_servers="b", checkpoint_dir=tmp_path)
    started: list[TriggerMode] = []

    def start(mode: TriggerMode) -> Any:
        started.append(mode)
        if mode is TriggerMode.REALTIME:
            return RefusedQuery("routes")
        query = FakeQuery("routes")
        query.lastProgress = {"batchId": 0}
        return query

    with caplog.at_level("WARNING"):
        query = ctx._start_in("routes", start, TriggerMode.REALTIME)
    assert started == [TriggerMode.REALTIME, TriggerMode.MICROBATCH]
    assert ctx.queries == [query]
    assert query.isActive
    assert ctx.mode_of_query["routes"] is TriggerMode.MICROBATCH
    assert "query 'routes' runs in micro-batches, not Real-Time Mode: Spark refused it: " in (
        caplog.text
    )
    assert "OPERATOR_OR_SINK_NOT_IN_ALLOWLIST" in caplog.text
    assert "\tat org" not in caplog.text
    ctx.restart(query)  # from its checkpoint, as it runs now: in micro-batches
    assert started[-1] is TriggerMode.MICROBATCH
