"""`sparkiq run` (sparkiq/spark/runner.py): a batch that the stop cuts off is no error in the
pipeline's log; which failures of a query are worth starting it again from its checkpoint,
and how often; what its progress lines say. (Running pipelines: tests/e2e.)"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sparkiq.spark.realtime import REALTIME_EXTRA_SLOTS, TriggerMode
from sparkiq.spark.runner import (
    RestartBudget,
    RunSettings,
    _master,
    _progress_line,
    _py4j_quiet,
    restart_reason,
)

PY4J_SAYS = "There was an exception while executing the Python Proxy on the Python Side."


def test_while_the_queries_stop_py4j_logs_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    py4j_log = logging.getLogger("py4j.clientserver")  # what py4j's callback server logs to
    with caplog.at_level(logging.INFO):
        with _py4j_quiet():
            try:
                raise RuntimeError("the batch's job was cancelled")
            except RuntimeError:
                py4j_log.exception(PY4J_SAYS)
        py4j_log.error("an error of a pipeline that runs")
    assert [r.getMessage() for r in caplog.records] == ["an error of a pipeline that runs"]


DESTROYED = (
    "[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source "
    'perform latestOffset: ... cimpl.KafkaException: KafkaError{code=_DESTROY_BROKER,val=-137,str="'
    'Failed to get watermark offsets: Local: Broker handle destroyed without termination"}'
)


def test_a_broker_gone_under_a_request_or_a_late_worker_is_worth_a_restart() -> None:
    assert restart_reason(DESTROYED) is not None
    java = "org.apache.kafka.common.errors.TimeoutException: Timeout of 60000ms expired"
    assert restart_reason(java) is not None
    assert restart_reason("Python worker failed to connect back.") is not None
    assert restart_reason("[UNRESOLVED_COLUMN] A column named `Total` cannot be resolved") is None
    assert restart_reason("ConfigError: table 'rewards' is windowed") is None


def test_restarts_are_counted_per_query_within_a_window() -> None:
    now = [0.0]
    budget = RestartBudget(clock=lambda: now[0])
    assert [budget.take("tables") for _ in range(10)] == list(range(1, 11))
    assert budget.take("tables") is None  # ten in ten minutes: no passing trouble
    assert budget.take("routes") == 1
    now[0] = 601.0  # a broker restart a month later is worth a restart again
    assert budget.take("tables") == 1


def test_a_local_real_time_run_gets_task_slots_for_its_sources(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    realtime = RunSettings("b", Path("c"), trigger_mode=TriggerMode.REALTIME)
    assert _master(realtime) == f"local[{4 + REALTIME_EXTRA_SLOTS}]"
    assert _master(RunSettings("b", Path("c"))) is None  # local_session's default
    given = RunSettings("b", Path("c"), master="spark://h:7077", trigger_mode=TriggerMode.REALTIME)
    assert _master(given) == "spark://h:7077"


def test_a_real_time_epoch_reads_as_one_and_a_micro_batch_as_before() -> None:
    status = {
        "name": "pos-routes",
        "trigger": "realtime",
        "batch": 12,
        "input_rows": 249,
        "input_rows_per_s": 46.8,
        "processed_rows_per_s": 47.7,
        "batch_ms": 5222,
        "between_epochs_ms": 164,
        "observed_total": {"routes": {"dead_letters": 2}},
    }
    assert _progress_line(status) == (
        "[pos-routes] (real-time) epoch 12: 249 rows, 47 rows/s in; epoch 5222 ms (records pass "
        "through as they arrive), 164 ms between epochs dead_letters=2"
    )
    batch = status | {"name": "tables", "trigger": "microbatch", "batch_ms": 180}
    assert _progress_line(batch) == (
        "[tables] batch 12: 249 rows, 48 rows/s processed, 180 ms dead_letters=2"
    )
