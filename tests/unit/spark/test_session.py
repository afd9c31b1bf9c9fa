"""The local session's settings: two task slots per core by default; checkpoints on the local
file system written without forks; Spark's falling-behind warnings quiet; the installed Kafka
connector's jars after the caller's; a stop that waits for cancelled tasks to end."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sparkiq.spark.connector import class_on_classpath
from sparkiq.spark.session import (
    _FALLING_BEHIND_LOGGERS,
    CHECKPOINT_FILE_MANAGER_CONF,
    _with_jars,
    default_local_master,
    quiet_falling_behind,
    use_local_checkpoint_files,
    wait_for_tasks,
)

pytest_plugins = ["tests.support.spark"]


def test_local_mode_gets_two_task_slots_per_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 3)
    assert default_local_master() == "local[6]"
    monkeypatch.setattr("os.cpu_count", lambda: None)  # unknown: as one core
    assert default_local_master() == "local[2]"
    # A run in Real-Time Mode: room besides for the partitions its queries hold slots for.
    assert default_local_master(extra_slots=8) == "local[10]"


@pytest.mark.spark
def test_local_checkpoints_use_a_file_manager_spark_has(spark: Any, tmp_path: Path) -> None:
    spark.conf.unset(CHECKPOINT_FILE_MANAGER_CONF)
    try:
        chosen = use_local_checkpoint_files(spark)
        assert chosen is not None
        assert chosen.endswith(".FileSystemBasedCheckpointFileManager")
        assert spark.conf.get(CHECKPOINT_FILE_MANAGER_CONF) == chosen
        # A query checkpoints through it: its offset and commit logs are written.
        query = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", 10)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .start()
        )
        try:
            query.processAllAvailable()
            assert (tmp_path / "cp" / "commits" / "0").exists()
        finally:
            query.stop()
    finally:
        spark.conf.unset(CHECKPOINT_FILE_MANAGER_CONF)


@pytest.mark.spark
def test_a_file_manager_the_caller_chose_is_kept(spark: Any) -> None:
    mine = "org.example.MyCheckpointFileManager"
    spark.conf.set(CHECKPOINT_FILE_MANAGER_CONF, mine)
    try:
        assert use_local_checkpoint_files(spark) == mine
        assert spark.conf.get(CHECKPOINT_FILE_MANAGER_CONF) == mine
    finally:
        spark.conf.unset(CHECKPOINT_FILE_MANAGER_CONF)


@pytest.mark.spark
def test_falling_behind_warnings_are_quiet_for_the_executor_spark_has(spark: Any) -> None:
    jvm = spark.sparkContext._jvm
    present = [name for name in _FALLING_BEHIND_LOGGERS if class_on_classpath(spark, name)]
    assert present, "Spark has none of the trigger executors named"
    quiet_falling_behind(spark)
    for name in present:
        level = jvm.org.apache.logging.log4j.LogManager.getLogger(name).getLevel()
        assert level.toString() == "ERROR"


def test_the_connectors_jars_join_the_jars_the_caller_gave() -> None:
    settings = {"spark.jars": "/mine/a.jar"}
    _with_jars(settings, [Path("/c/k.jar"), Path("/mine/a.jar")])
    assert settings["spark.jars"] == "/mine/a.jar,/c/k.jar"
    empty: dict[str, str] = {}
    _with_jars(empty, [Path("/c/k.jar")])
    assert empty == {"spark.jars": "/c/k.jar"}


def test_the_stop_waits_until_cancelled_tasks_have_ended(spark: Any) -> None:
    sc = spark.sparkContext
    ended = threading.Event()

    def long_job() -> None:
        sc.setJobGroup("sparkiq-test-long-job", "cancelled below", interruptOnCancel=True)
        try:
            spark.range(10**12).where("id % 1000003 = 1").count()
        except Exception:  # cancelled
            pass
        finally:
            ended.set()

    job = threading.Thread(target=long_job, daemon=True)
    job.start()
    deadline = time.monotonic() + 60
    while wait_for_tasks(spark, 0.0):  # until its tasks run (it would run for hours)
        assert not ended.is_set(), "the job ended before it was cancelled"
        assert time.monotonic() < deadline, "its tasks were never seen running"
        time.sleep(0.05)
    sc.cancelJobGroup("sparkiq-test-long-job")
    assert wait_for_tasks(spark, 30.0)
    assert ended.wait(30.0)
    job.join(30.0)
