"""Structured logs: text and JSON lines, the request id on every record, the status line."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Iterator

import orjson
import pytest

from sparkiq.cli.logs import LogFormat, StatusLineHandler, configure_logging
from sparkiq.http.messages.requestid import REQUEST_ID
from sparkiq.http.messages.responses import Outcome
from sparkiq.http.metrics import HttpMetrics

NODE = "http://127.0.0.1:8101"


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


def json_lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines() if line]


@pytest.mark.parametrize(("level", "shown"), [("INFO", False), ("DEBUG", True)])
def test_the_kafka_libraries_lines_are_written_at_debug_only(level: str, shown: bool) -> None:
    aiokafka = logging.getLogger("aiokafka")
    before = aiokafka.level, aiokafka.propagate, list(aiokafka.handlers)
    stream = io.StringIO()
    try:
        configure_logging(level, LogFormat.TEXT, stream=stream)
        aiokafka.warning("Unable connect to node with id 1")
        aiokafka.debug("a debug line of aiokafka's")  # too chatty even when debugging
        logging.getLogger("sparkiq.librdkafka").debug("ERROR FAIL [rdkafka] refused")
        logging.getLogger("sparkiq.group").warning("sparkiq's own warning")
    finally:
        aiokafka.setLevel(before[0])
        aiokafka.propagate = before[1]
        aiokafka.handlers[:] = before[2]
    text = stream.getvalue()
    assert ("aiokafka: Unable connect to node" in text) is shown
    assert ("[rdkafka] refused" in text) is shown
    assert "a debug line of aiokafka's" not in text
    assert "sparkiq's own warning" in text


def test_aiokafka_warnings_become_one_sparkiq_line_now_and_then(
    capsys: pytest.CaptureFixture[str],
) -> None:
    aiokafka = logging.getLogger("aiokafka")
    before = aiokafka.level, aiokafka.propagate, list(aiokafka.handlers)
    stream = io.StringIO()
    try:
        configure_logging("INFO", LogFormat.TEXT, stream=stream)
        aiokafka.warning("Heartbeat failed for group g because it is rebalancing")  # routine
        for _ in range(5):
            aiokafka.warning("Unable connect to node with id 1: [Errno 111] Connection refused")
    finally:
        aiokafka.setLevel(before[0])
        aiokafka.propagate = before[1]
        aiokafka.handlers[:] = before[2]
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].endswith(
        "WARNING sparkiq.kafka: the Kafka client reports: Unable connect to node with id 1: "
        "[Errno 111] Connection refused (said once per 60s; --log-level debug shows every line)"
    )
    assert capsys.readouterr().err == ""  # nothing through Python's last-resort handler


def test_json_lines_carry_node_request_id_and_exception() -> None:
    out = io.StringIO()
    configure_logging("INFO", LogFormat.JSON, node=NODE, stream=out)
    log = logging.getLogger("sparkiq.test")
    log.info("outside %s", "a request")
    token = REQUEST_ID.set("req-42")
    try:
        log.warning("inside")
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    finally:
        REQUEST_ID.reset(token)
    log.debug("below the level")
    first, second, third = json_lines(out)
    assert first["message"] == "outside a request"
    assert first["level"] == "INFO"
    assert first["logger"] == "sparkiq.test"
    assert first["node"] == NODE
    assert first["request_id"] is None
    assert first["exception"] is None
    assert str(first["time"]).endswith("Z")
    assert "T" in str(first["time"])
    assert second["request_id"] == "req-42"
    assert second["level"] == "WARNING"
    assert third["request_id"] == "req-42"
    assert "ValueError: boom" in str(third["exception"])


def test_text_lines_name_the_request_id_when_there_is_one() -> None:
    out = io.StringIO()
    configure_logging("INFO", "text", node=NODE, stream=out)
    log = logging.getLogger("sparkiq.test")
    log.info("plain")
    token = REQUEST_ID.set("abc")
    try:
        log.info("in a request")
    finally:
        REQUEST_ID.reset(token)
    plain, in_request = out.getvalue().splitlines()
    assert plain.endswith("INFO sparkiq.test: plain")
    assert in_request.endswith("INFO sparkiq.test: in a request request_id=abc")


async def test_each_task_logs_its_own_request_id() -> None:
    out = io.StringIO()
    configure_logging("INFO", LogFormat.JSON, stream=out)
    log = logging.getLogger("sparkiq.test")

    async def answer(request_id: str) -> None:
        REQUEST_ID.set(request_id)  # each task runs in a copy of the context
        for _ in range(3):
            await asyncio.sleep(0)
            log.info("step of %s", request_id)

    await asyncio.gather(answer("one"), answer("two"))
    lines = json_lines(out)
    assert len(lines) == 6
    for line in lines:
        assert line["message"] == f"step of {line['request_id']}"
    assert REQUEST_ID.get() is None


def test_access_log_lines_when_on() -> None:
    out = io.StringIO()
    configure_logging("INFO", LogFormat.JSON, node=NODE, stream=out)
    metrics = HttpMetrics(access_log=True)
    token = REQUEST_ID.set("r-1")
    try:
        metrics.observe("key", Outcome.FORWARDED, 200, 0.0012345)
    finally:
        REQUEST_ID.reset(token)
    (line,) = json_lines(out)
    assert line["logger"] == "sparkiq.access"
    assert line["endpoint"] == "key"
    assert line["outcome"] == "forwarded"
    assert line["status"] == 200
    assert line["ms"] == 1.234
    assert line["request_id"] == "r-1"
    assert line["node"] == NODE
    assert metrics.count("key", Outcome.FORWARDED) == 1


def test_an_observer_logs_when_the_access_log_is_on() -> None:
    out = io.StringIO()
    configure_logging("INFO", LogFormat.JSON, node=NODE, stream=out)
    metrics = HttpMetrics(access_log=True)
    metrics.observer("key", Outcome.LOCAL, 200)(0.0005)
    (line,) = json_lines(out)
    assert (line["endpoint"], line["outcome"], line["status"]) == ("key", "local", 200)
    assert line["ms"] == 0.5
    assert metrics.count("key", Outcome.LOCAL) == 1


def test_access_log_is_off_by_default() -> None:
    out = io.StringIO()
    configure_logging("DEBUG", LogFormat.JSON, stream=out)
    metrics = HttpMetrics()
    metrics.observe("key", Outcome.LOCAL, 200, 0.001)
    assert out.getvalue() == ""
    assert metrics.count("key") == 1
    # Off means the plain counting function, not a check per request.
    assert metrics.observe.__name__ == "_count"


class Terminal(io.StringIO):
    """What a terminal is to the handler: a stream that says it is one."""

    def isatty(self) -> bool:
        return True


def test_status_line_stays_below_the_records() -> None:
    out = Terminal()
    handler = configure_logging("INFO", LogFormat.TEXT, stream=out)
    assert isinstance(handler, StatusLineHandler)
    assert handler.live
    log = logging.getLogger("sparkiq.test")
    handler.set_status("restoring: 1/2")
    log.info("a record")
    handler.set_status("restoring: 2/2")
    handler.clear_status()
    log.info("after")
    text = out.getvalue()
    # The record is written on a cleared line and the status is drawn again after it.
    assert "\r\x1b[Krestoring: 1/2\r\x1b[K" in text
    record_at = text.index("a record")
    assert text.index("restoring: 1/2", record_at) > record_at
    assert text.rstrip().endswith("INFO sparkiq.test: after")
    assert text.count("restoring: 2/2") == 1


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_status_outside_a_terminal_is_a_plain_line_every_few_seconds() -> None:
    out = io.StringIO()  # a file, a pipe: no terminal
    clock = Clock()
    handler = StatusLineHandler(out, every_s=5.0, clock=clock)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    assert not handler.live
    for n in range(21):  # 10 s of states, one every half second
        handler.set_status(f"restoring: {n}/20")
        clock.now += 0.5
    handler.handle(logging.LogRecord("sparkiq.test", logging.INFO, "", 0, "a record", None, None))
    handler.clear_status()
    text = out.getvalue()
    assert "\r" not in text
    assert "\x1b" not in text
    assert text.endswith("\n")
    assert text.splitlines() == [
        "INFO sparkiq.status: restoring: 0/20",
        "INFO sparkiq.status: restoring: 10/20",  # 5 s later
        "INFO sparkiq.status: restoring: 20/20",
        "INFO sparkiq.test: a record",
    ]


def test_json_logs_on_a_terminal_get_no_status_line_either() -> None:
    out = Terminal()
    handler = configure_logging("INFO", LogFormat.JSON, node=NODE, stream=out)
    assert not handler.live
    handler.set_status("restoring: 1/2")
    handler.set_status("restoring: 2/2")  # within the interval: skipped
    (line,) = json_lines(out)
    assert line["message"] == "restoring: 1/2"
    assert line["logger"] == "sparkiq.status"
    assert line["level"] == "INFO"
    assert line["node"] == NODE
