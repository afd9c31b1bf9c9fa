"""Which queries run in Real-Time Mode: `sparkiq run --trigger`, the facts read from a query's
plan, and the reason a query that cannot run in it is given."""

from __future__ import annotations

import re
from typing import Any

import pytest

from sparkiq.core.errors import ConfigError
from sparkiq.spark.realtime import (
    MICROBATCH_SLOTS,
    KafkaRead,
    PlanFacts,
    TriggerMode,
    is_realtime_refusal,
    parse_trigger,
    plan_facts,
    realtime_refusal,
    spark_has_realtime_mode,
)

pytest_plugins = ["tests.support.spark"]


@pytest.mark.parametrize(
    ("text", "mode", "interval"),
    [
        ("realtime", TriggerMode.REALTIME, "1 second"),
        ("Real-Time", TriggerMode.REALTIME, "1 second"),
        ("microbatch", TriggerMode.MICROBATCH, "1 second"),
        ("250 milliseconds", TriggerMode.MICROBATCH, "250 milliseconds"),
        ("0 seconds", TriggerMode.MICROBATCH, None),
        ("0", TriggerMode.MICROBATCH, None),
    ],
)
def test_the_trigger_option_takes_a_mode_or_an_interval(
    text: str, mode: TriggerMode, interval: str | None
) -> None:
    assert parse_trigger(text) == (mode, interval)


def test_a_trigger_that_is_neither_is_named() -> None:
    with pytest.raises(ConfigError, match="'fast'"):
        parse_trigger("fast")


STATELESS = PlanFacts(kafka_reads=(KafkaRead(("pos",), capped=False),))
FINE: dict[str, Any] = {
    "spark_version": "4.2.0",
    "has_realtime_api": True,
    "builtin_connector": True,
    "finishes_on_driver": False,
    "source_partitions": 3,
    "total_slots": 3 + MICROBATCH_SLOTS,
}


def test_a_stateless_query_on_sparks_kafka_connector_runs_in_real_time_mode() -> None:
    assert realtime_refusal(STATELESS, **FINE) is None


@pytest.mark.parametrize(
    ("facts", "changed", "reason"),
    [
        (STATELESS, {"has_realtime_api": False, "spark_version": "4.0.1"}, "Spark 4.0.1 has no"),
        (STATELESS, {"builtin_connector": False}, "sparkiq's Python connector"),
        (STATELESS, {"finishes_on_driver": True}, "finishing step runs on the driver"),
        (
            PlanFacts(("Aggregate",), STATELESS.kafka_reads),
            {},
            r"it keeps state \(Aggregate\), which Spark's Real-Time Mode runs from Spark 4.3",
        ),
        (PlanFacts(kafka_reads=(KafkaRead(("pos",), capped=True),)), {}, "max_offsets_per"),
        (PlanFacts(other_sources=("rate",)), {}, "it reads rate, which is no Real-Time source"),
        (STATELESS, {"total_slots": 4}, r"needs 3 task slots .* give it 5 or more"),
        (
            STATELESS,
            {"total_slots": 8, "held_slots": 4},
            r"Spark has 8 \(4 held by Real-Time queries, 2 kept .*local\[9\]",
        ),
    ],
)
def test_a_query_that_cannot_run_in_real_time_mode_is_told_why(
    facts: PlanFacts, changed: dict[str, Any], reason: str
) -> None:
    said = realtime_refusal(facts, **(FINE | changed))
    assert said is not None
    assert re.search(reason, said), said


def test_state_is_no_obstacle_from_spark_4_3_on() -> None:
    stateful = PlanFacts(("Aggregate", "Deduplicate"), STATELESS.kafka_reads)
    assert realtime_refusal(stateful, **(FINE | {"spark_version": "4.3.0"})) is None
    assert realtime_refusal(stateful, **(FINE | {"spark_version": "4.2.0"})) is not None


def test_sparks_refusals_at_start_are_told_from_failures_while_running() -> None:
    # As Spark 4.2.0 words them (seen when starting such queries).
    assert is_realtime_refusal(
        "[STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST] Streaming real-time mode "
        "has the following limitation: The operator(s): ...HashAggregateExec..."
    )
    assert is_realtime_refusal("maxOffsetsPerTrigger is not compatible with real time mode")
    assert not is_realtime_refusal("org.apache.kafka.common.errors.TimeoutException: ...")


def test_the_plan_says_what_a_query_reads_and_which_state_it_keeps(spark: Any) -> None:
    from pyspark.sql import functions as F

    def kafka(*options: tuple[str, str]) -> Any:
        reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", "b:1")
        for name, value in options:
            reader = reader.option(name, value)
        return reader.load()

    pos = kafka(("subscribe", "pos,returns"))
    capped = kafka(("subscribe", "pos"), ("maxOffsetsPerTrigger", "100"))
    routed = pos.select("key", F.explode(F.array("value")).alias("value")).where("key is not null")
    assert plan_facts(routed) == PlanFacts(kafka_reads=(KafkaRead(("pos", "returns"), False),))
    both = routed.unionByName(capped.select("key", "value"))
    assert plan_facts(both).kafka_reads == (
        KafkaRead(("pos", "returns"), False),
        KafkaRead(("pos",), True),
    )
    assert plan_facts(both).topics == ("pos", "returns")
    counted = pos.groupBy("key").count().dropDuplicates(["key"])
    assert plan_facts(counted).stateful == ("Deduplicate", "Aggregate")
    rate = spark.readStream.format("rate").load()
    assert plan_facts(rate).other_sources == ("rate",)
    assert spark_has_realtime_mode()  # PySpark 4.2, as pinned
