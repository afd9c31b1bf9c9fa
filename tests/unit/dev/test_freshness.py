"""The demo's freshness figures: percentiles by nearest rank, and the lines it prints."""

from __future__ import annotations

import pytest

from sparkiq.dev.freshness import Freshness, percentile


def test_percentiles_take_the_nearest_rank_above() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 0.5) == 51
    assert percentile(values, 0.9) == 91
    assert percentile(values, 0.99) == 100
    assert percentile([3.0], 0.99) == 3
    with pytest.raises(ValueError, match="no values"):
        percentile([], 0.5)


def test_the_lines_name_both_paths_and_what_did_not_show() -> None:
    measured = Freshness(table_ms=(900.0, 1100.0, 1000.0), routes_ms=(8.0, 12.0), missed=1)
    assert measured.lines() == [
        "produce -> queryable (latest-invoice on a node): p50 1000 ms, p90 1100 ms, "
        "max 1100 ms (3 invoices)",
        "produce -> routed (line items in hadoop-sink): p50 12 ms, p90 12 ms, max 12 ms "
        "(2 invoices)",
        "1 invoices did not show in time",
    ]
    assert Freshness((), ()).lines()[1].endswith("none seen")
