"""The node's logs: text or JSON lines, each record naming its node and request id.

`configure_logging(level, fmt, node=url)` installs one stderr handler on the root logger:

- `LogFormat.TEXT`: `time LEVEL logger: message`, with ` request_id=<id>` appended when the
  record was made while a request was answered;
- `LogFormat.JSON`: one object per line with `time` (UTC, ISO 8601), `level`, `logger`,
  `message`, `node`, `request_id` (null outside a request), `exception` (the formatted
  traceback or null), and the fields an access-log line carries (`endpoint`, `outcome`,
  `status`, `ms`).

The request id comes from `sparkiq.http.messages.requestid.REQUEST_ID`, read by `RequestIdFilter` on
the handler: the handler runs in the task that logs, so the context variable holds that
task's request. The handler can also keep a live status line (the restore progress) at the
bottom of a terminal: records are written above it and it is drawn again after each one.
Where the output is not a terminal (a file, a pipe), or is JSON, there is no redrawn line:
a status is a record, at most one every few seconds (`sparkiq.core.statusline`).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from enum import StrEnum
from typing import TextIO

import orjson

from sparkiq.core.statusline import PLAIN_EVERY_S, StatusLine
from sparkiq.http.messages.requestid import REQUEST_ID

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Attributes an access-log record carries (see `sparkiq.http.metrics`), copied into JSON lines.
ACCESS_FIELDS = ("endpoint", "outcome", "status", "ms")

# The logger name of a status written as a record (not on a terminal).
STATUS_LOGGER = "sparkiq.status"


class LogFormat(StrEnum):
    """How log records are written."""

    TEXT = "text"  # for people: one line per record
    JSON = "json"  # for log pipelines: one JSON object per line


class RequestIdFilter(logging.Filter):
    """Puts `node` and the current `request_id` (or None) on every record it sees."""

    def __init__(self, node: str | None = None) -> None:
        super().__init__()
        self.node = node

    def filter(self, record: logging.LogRecord) -> bool:
        record.node = self.node
        record.request_id = REQUEST_ID.get()
        return True


class TextFormatter(logging.Formatter):
    """Today's text lines, with ` request_id=<id>` when the record has one."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        request_id = getattr(record, "request_id", None)
        if request_id is None:
            return text
        first, newline, rest = text.partition("\n")  # keep a traceback below the id
        return f"{first} request_id={request_id}{newline}{rest}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        exception = None
        if record.exc_info:
            exception = self.formatException(record.exc_info)
        elif record.exc_text:
            exception = record.exc_text
        entry: dict[str, object] = {
            "time": _iso_utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "node": getattr(record, "node", None),
            "request_id": getattr(record, "request_id", None),
            "exception": exception,
        }
        for name in ACCESS_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        return orjson.dumps(entry, default=str).decode()


def _iso_utc(created: float) -> str:
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


class StatusLineHandler(logging.StreamHandler[TextIO]):
    """A stream handler that can keep one live status line below the records it writes.

    On a terminal (`live`), `set_status(text)` draws `text` in place of the previous status
    (the line is redrawn with a carriage return) and records are written above it.
    Elsewhere (a file, a pipe, JSON lines) a status is a record of its own (logger
    `STATUS_LOGGER`, INFO), at most one every `every_s` seconds, so the output stays lines.
    """

    def __init__(
        self,
        stream: TextIO,
        *,
        live: bool | None = None,
        every_s: float = PLAIN_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`live`: draw a status line in place (default: when `stream` is a terminal)."""
        super().__init__(stream)
        self._line = StatusLine(live=_isatty(stream) if live is None else live, every_s=every_s)
        self._clock = clock

    @property
    def live(self) -> bool:
        """Whether the status is a line drawn in place (a terminal), not records."""
        return self._line.live

    def set_status(self, text: str) -> None:
        self.acquire()
        try:
            out = self._line.show(text, self._clock())
            if not out:
                return
            if not self.live:
                # A record like any other (the handler's format: text or JSON), not a bare line.
                self.handle(logging.LogRecord(STATUS_LOGGER, logging.INFO, "", 0, text, None, None))
                return
            self.stream.write(out)
            self.stream.flush()
        finally:
            self.release()

    def clear_status(self) -> None:
        self.acquire()
        try:
            out = self._line.clear()
            if out:
                self.stream.write(out)
                self.stream.flush()
        finally:
            self.release()

    def emit(self, record: logging.LogRecord) -> None:
        hide = self._line.hide()
        if not hide:
            super().emit(record)
            return
        # The handler lock is held around emit (Handler.handle): the status cannot change here.
        self.stream.write(hide)
        super().emit(record)
        self.stream.write(self._line.shown)
        self.stream.flush()


def _isatty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if isatty is not None else False
    except ValueError:  # closed
        return False


def configure_logging(
    level: str | int = "INFO",
    fmt: LogFormat | str = LogFormat.TEXT,
    *,
    node: str | None = None,
    stream: TextIO | None = None,
) -> StatusLineHandler:
    """Log to `stream` (stderr) in `fmt`, at `level`; replaces the root logger's handlers.

    Returns the handler, whose status line `sparkiq.node.restore.progress` may use: a line
    drawn in place for text on a terminal, records at most every few seconds otherwise.
    aiokafka's and librdkafka's lines are written at level DEBUG only (aiokafka's INFO lines
    are one per rebalance step); at other levels aiokafka's warnings become one sparkiq line
    a minute (`KafkaClientSummary`).
    """
    out = stream if stream is not None else sys.stderr
    handler = StatusLineHandler(out, live=LogFormat(fmt) is LogFormat.TEXT and _isatty(out))
    handler.addFilter(RequestIdFilter(node))
    handler.setFormatter(JsonFormatter() if LogFormat(fmt) is LogFormat.JSON else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    # The Kafka libraries' own lines (aiokafka's, and librdkafka's through
    # `sparkiq.kafka.clientlog`) reach the log at DEBUG only. At other levels aiokafka's
    # warnings (a broker that went away, say) become one line of sparkiq's now and then.
    # aiokafka's handlers of its own (the group member listens for a refused login) still
    # see its records.
    debug = root.getEffectiveLevel() <= logging.DEBUG
    aiokafka = logging.getLogger("aiokafka")
    aiokafka.setLevel(logging.INFO if debug else logging.WARNING)
    aiokafka.propagate = debug
    for old in [h for h in aiokafka.handlers if isinstance(h, KafkaClientSummary)]:
        aiokafka.removeHandler(old)
    if not debug:
        aiokafka.addHandler(KafkaClientSummary())
    return handler


class KafkaClientSummary(logging.Handler):
    """aiokafka's warnings as one `sparkiq.kafka` warning per `every_s` (the first at once):
    the Kafka client retries a lost broker several times a second, each with a line."""

    def __init__(self, every_s: float = 60.0) -> None:
        super().__init__(logging.WARNING)
        self.every_s = every_s
        self._said_at: float | None = None
        self._since = 0

    # Warnings aiokafka gives for what a group does every rebalance: not worth a line.
    ROUTINE = ("because it is rebalancing",)

    def emit(self, record: logging.LogRecord) -> None:
        if any(text in record.getMessage() for text in self.ROUTINE):
            return
        now = time.monotonic()
        if self._said_at is not None and now - self._said_at < self.every_s:
            self._since += 1
            return
        more = f"; {self._since} more such lines since the last" if self._since else ""
        self._said_at, self._since = now, 0
        logging.getLogger("sparkiq.kafka").warning(
            "the Kafka client reports: %s%s (said once per %gs; --log-level debug shows "
            "every line)",
            record.getMessage(),
            more,
            self.every_s,
        )
