"""Times as callers write them (sparkiq.core.timespec)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sparkiq.core.errors import FormatError
from sparkiq.core.timespec import LONG_MAX, now_ms, parse_time

NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1767225600000", NOW),
        ("-5000", -5000),
        ("0", 0),
        (str(LONG_MAX), LONG_MAX),
        ("2026-01-01T00:00:00Z", NOW),
        ("2026-01-01T01:00:00+01:00", NOW),
        ("2026-01-01T00:00:00.250Z", NOW + 250),
        ("2026-01-01", NOW),  # no offset: UTC
        ("2025-12-31T23:59", NOW - 60_000),
        ("now", NOW),
        ("-15m", NOW - 15 * 60_000),
        ("-90s", NOW - 90_000),
        ("-500ms", NOW - 500),
        ("-2h", NOW - 7_200_000),
        ("-1d", NOW - 86_400_000),
        ("-1w", NOW - 7 * 86_400_000),
        ("+5m", NOW + 300_000),
        (" 5m", NOW + 300_000),  # `+5m` in a query string that did not encode the `+`
    ],
)
def test_times_parse_in_every_form(text: str, expected: int) -> None:
    assert parse_time(text, NOW) == expected


@pytest.mark.parametrize(
    "text", ["", "soon", "15m", "-15min", "-1.5h", "2026-13-01", str(LONG_MAX + 1), "- 5m"]
)
def test_other_text_is_a_format_error_that_names_the_forms(text: str) -> None:
    with pytest.raises(FormatError, match=r"epoch ms|out of range"):
        parse_time(text, NOW)


def test_now_is_the_wall_clock_in_ms() -> None:
    before = int(datetime.now(UTC).timestamp() * 1000)
    assert before - 1 <= now_ms() <= before + 1_000
