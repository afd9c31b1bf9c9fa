"""Points in time as callers write them: epoch milliseconds, ISO-8601, or relative to now.

- epoch milliseconds, an integer: `1767225600000`, `-5000`;
- ISO-8601, UTC when it names no offset: `2026-01-01T00:00:00Z`, `2026-01-01T01:00:00+01:00`,
  `2026-01-01`;
- now, or now minus or plus an amount: `now`, `-15m`, `-90s`, `-500ms`, `-2h`, `-1d`, `+5m`.

Units of relative times: `ms`, `s`, `m` (minutes), `h`, `d`, `w`. In a URL query a `+` reads
as a space: write `%2B5m` (a space before the amount is read as `+` for that reason).
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta

from sparkiq.core.errors import FormatError

__all__ = ["LONG_MAX", "LONG_MIN", "now_ms", "parse_time"]

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
_RELATIVE = re.compile(r"([+-])([0-9]+)(ms|s|m|h|d|w)", re.ASCII)
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FORMS = "epoch ms (1767225600000), ISO-8601 (2026-01-01T00:00:00Z) or relative to now (-15m)"


def now_ms() -> int:
    """The wall clock, in epoch milliseconds."""
    return time.time_ns() // 1_000_000


def parse_time(text: str, now: int) -> int:
    """`text` (see the module) as epoch milliseconds; `now` is the clock relative times
    count from. Raises `FormatError` for text that is none of the forms, or out of range."""
    raw = text
    if text.startswith(" "):  # `+5m` in a query string that did not encode the `+`
        text = "+" + text.lstrip(" ")
    text = text.strip()
    if _INTEGER.fullmatch(text):
        value = int(text)
    elif text == "now":
        value = now
    elif (relative := _RELATIVE.fullmatch(text)) is not None:
        sign, amount, unit = relative.groups()
        delta = int(amount) * _UNIT_MS[unit]
        value = now - delta if sign == "-" else now + delta
    else:
        value = _iso_ms(raw, text)
    if not LONG_MIN <= value <= LONG_MAX:
        raise FormatError(f"time {raw!r} is out of range (a signed 64-bit count of ms)")
    return value


def _iso_ms(raw: str, text: str) -> int:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise FormatError(f"time {raw!r} does not parse; write it as {_FORMS}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)
