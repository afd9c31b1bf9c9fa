"""A status that changes now and then (progress), as text for a terminal or for a file.

On a terminal the status is one line drawn again in place: a carriage return and an erase
before each state. In a file or a pipe that makes one endless line, so there each state is a
plain line of its own, at most one every `every_s` seconds (the states in between are
skipped), and the last state is written when the status ends. `StatusLine` says what to
write; its callers write it (`sparkiq.cli.logs.StatusLineHandler`, the demo's progress).
"""

from __future__ import annotations

CLEAR_LINE = "\r\x1b[K"  # back to the start of the line, and erase it
PLAIN_EVERY_S = 5.0  # a plain line at most this often


class StatusLine:
    """The text that shows one changing status: `live` (a terminal) or as plain lines."""

    def __init__(self, *, live: bool, every_s: float = PLAIN_EVERY_S) -> None:
        self.live = live
        self.every_s = every_s
        self.shown = ""  # live: the state on the screen now ("" for none)
        self._written_at: float | None = None  # plain: when a state was last written
        self._last = ""  # plain: the last state given, written or not
        self._last_written = ""  # plain: the last state written

    def show(self, text: str, now: float) -> str:
        """What to write to show `text` now: the line drawn again (live), a plain line when
        the last one is `every_s` old, or "" (skipped)."""
        if self.live:
            self.shown = text
            return CLEAR_LINE + text
        self._last = text
        if self._written_at is not None and now - self._written_at < self.every_s:
            return ""
        self._written_at = now
        self._last_written = text
        return text + "\n"

    def end(self, text: str | None = None) -> str:
        """What to write when the status is over, leaving `text` (default: the last state)
        on a line of its own; nothing that was written already is repeated."""
        if self.live:
            final = self.shown if text is None else text
            self.shown = ""
            return CLEAR_LINE + final + "\n" if final else ""
        final = self._last if text is None else text
        unwritten = final and final != self._last_written
        self._written_at = None
        self._last = self._last_written = ""
        return final + "\n" if unwritten else ""

    def hide(self) -> str:
        """What erases the live line (to write something above it); "" when none shows."""
        return CLEAR_LINE if self.live and self.shown else ""

    def clear(self) -> str:
        """What erases the live line and forgets it (the status is gone, not replaced)."""
        out = self.hide()
        self.shown = ""
        return out
