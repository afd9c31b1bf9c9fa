"""Server-sent events (the `text/event-stream` of watches): writing them, and reading the
stream of another node a watch is relayed from.

An event here is an `id` and one line of JSON `data`; a comment line (`:`) keeps an idle
stream open; `retry:` tells a client how long to wait before it reconnects. Only what
sparkiq's own streams use is read: `id`, `data` (one line), `event`, comments.
"""

from __future__ import annotations

from dataclasses import dataclass

SSE_HEADERS: tuple[tuple[str, str], ...] = (
    ("content-type", "text/event-stream"),
    ("cache-control", "no-store"),
    ("x-accel-buffering", "no"),  # proxies that buffer answers would hold events back
)
HEARTBEAT = b": keep-alive\n\n"


def event(event_id: str | None, data: bytes, name: str | None = None) -> bytes:
    """One event; `data` is one line of JSON (orjson never writes a newline). Without an id
    the client's last event id stays as it was."""
    head = b"" if name is None else b"event: " + name.encode() + b"\n"
    if event_id is not None:
        head += b"id: " + event_id.encode() + b"\n"
    return head + b"data: " + data + b"\n\n"


def retry(ms: int) -> bytes:
    """How long a client waits before it reconnects (sent first, and before a stream ends)."""
    return f"retry: {ms}\n\n".encode()


@dataclass(slots=True)
class Event:
    """One event read off a stream (`EventReader`); `name` is "message" unless set."""

    event_id: str | None
    data: bytes
    name: str = "message"


class EventReader:
    """Splits the bytes of an event stream into events, as they arrive.

    `feed(chunk)` returns the events completed by it; comments and `retry:` lines are
    counted as signs of life (`lines`), nothing more.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._id: str | None = None
        self._data: list[bytes] = []
        self._name = "message"
        self.lines = 0

    def feed(self, chunk: bytes) -> list[Event]:
        self._buffer += chunk
        events: list[Event] = []
        while True:
            end = self._buffer.find(b"\n")
            if end < 0:
                return events
            line = self._buffer[:end].rstrip(b"\r")
            self._buffer = self._buffer[end + 1 :]
            self.lines += 1
            if not line:
                if self._data:
                    events.append(Event(self._id, b"\n".join(self._data), self._name))
                self._id, self._data, self._name = None, [], "message"
                continue
            if line.startswith(b":"):
                continue
            field, _, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            if field == b"data":
                self._data.append(value)
            elif field == b"id":
                self._id = value.decode("utf-8", "replace")
            elif field == b"event":
                self._name = value.decode("utf-8", "replace")
