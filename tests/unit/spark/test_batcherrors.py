"""`batcherrors`: a foreachBatch function's Java error reaches Spark without its frames, and
Spark still tells a batch its query's stop cut off from one that failed."""

from __future__ import annotations

from typing import Any

import pytest

from sparkiq.spark.batcherrors import MAX_CHARS, BatchJavaError, without_frames

pytest_plugins = ["tests.support.spark"]

FRAMES = "".join(f"\tat org.apache.spark.Frame{i}.run(Frame.scala:{i})\n" for i in range(150))


class Py4JJavaError(Exception):
    """Stands in for py4j's: its text is the call, then the JVM's stack trace."""

    __module__ = "py4j.protocol"


def test_the_headlines_are_kept_and_the_frames_go() -> None:
    error = Py4JJavaError(
        "An error occurred while calling o74.collectToPython.\n"
        ": org.apache.spark.SparkException: Job aborted.\n"
        f"{FRAMES}"
        "Caused by: org.apache.kafka.common.errors.TimeoutException: Expiring 3 record(s)\n"
        f"{FRAMES}\t... 42 more\n"
    )
    assert len(str(error)) > 10_000
    short = without_frames(error)
    assert isinstance(short, BatchJavaError)
    assert str(short) == (
        "py4j.protocol.Py4JJavaError: An error occurred while calling o74.collectToPython.\n"
        ": org.apache.spark.SparkException: Job aborted.\n"
        "Caused by: org.apache.kafka.common.errors.TimeoutException: Expiring 3 record(s)"
    )
    endless = Py4JJavaError("An error occurred while calling o1.x.\n: " + "y" * 5_000)
    assert len(str(without_frames(endless))) < MAX_CHARS + 100


@pytest.mark.spark
def test_spark_still_tells_an_interrupted_batch_from_a_failed_one(spark: Any) -> None:
    """Spark's own check, on the text the JVM gets from a failed foreachBatch function."""
    from py4j.protocol import Py4JJavaError as RealPy4JJavaError

    jvm = spark.sparkContext._jvm
    stream_execution = jvm.org.apache.spark.sql.execution.streaming.runtime.StreamExecution

    def interrupted_by_stop(error: BaseException) -> bool:
        told = f"An exception was raised by the Python Proxy. Return Message: {error}"
        exc = jvm.py4j.Py4JException(told)
        return bool(stream_execution.isInterruptionException(exc, spark.sparkContext._jsc.sc()))

    jvm.java.lang.Thread.currentThread().interrupt()
    with pytest.raises(RealPy4JJavaError) as interrupted:
        jvm.java.lang.Thread.sleep(1)  # a job's wait that the stop interrupts
    with pytest.raises(RealPy4JJavaError) as failed:
        jvm.java.lang.Class.forName("no.such.Class")
    assert "java.lang.InterruptedException" in str(interrupted.value)
    assert interrupted_by_stop(without_frames(interrupted.value))
    assert not interrupted_by_stop(without_frames(failed.value))
