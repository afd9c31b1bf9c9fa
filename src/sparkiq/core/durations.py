"""Durations as people write them: ``"1 minute"``, ``"30 seconds"``, ``"500ms"``, ``"1h"``."""

from __future__ import annotations

import re

from sparkiq.core.errors import ConfigError

_UNIT_MS = {
    "ms": 1,
    "millisecond": 1,
    "s": 1000,
    "second": 1000,
    "m": 60_000,
    "minute": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
}
_DURATION = re.compile(r"^\s*(\d+)\s*([a-z]+)\s*$")


def parse_duration_ms(text: str | int) -> int:
    """Milliseconds in a duration such as ``"1 minute"``, ``"30 seconds"`` or ``"500ms"``."""
    if isinstance(text, int):
        if text <= 0:
            raise ConfigError(f"a duration must be positive, got {text} ms")
        return text
    match = _DURATION.match(text.lower())
    unit = match.group(2) if match else ""
    if unit not in _UNIT_MS and unit.endswith("s"):
        unit = unit[:-1]  # "minutes", "seconds"
    if match is None or unit not in _UNIT_MS:
        raise ConfigError(
            f"cannot read the duration {text!r}: write a whole number and a unit, e.g. "
            "'1 minute', '30 seconds', '500 ms'"
        )
    ms = int(match.group(1)) * _UNIT_MS[unit]
    if ms <= 0:
        raise ConfigError(f"a duration must be positive, got {text!r}")
    return ms
