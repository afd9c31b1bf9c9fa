"""`sparkiq run`'s stop (sparkiq/spark/runner.py): a batch that the stop cuts off is no error
in the pipeline's log. (Running pipelines: tests/e2e.)"""

from __future__ import annotations

import logging

import pytest

from sparkiq.spark.runner import _py4j_quiet

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
