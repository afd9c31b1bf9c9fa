"""Loyalty notifications: the per-customer running total, batch by batch (a pure unit test)."""

from __future__ import annotations

from typing import Any

import pandas as pd  # type: ignore[import-untyped]

from sparkiq.dev.pos.loyalty import NOTIFICATION_COLUMNS, running_totals


class FakeState:
    """The part of Spark's GroupState `running_totals` uses."""

    def __init__(self) -> None:
        self.value: tuple[Any, ...] | None = None

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self) -> tuple[Any, ...]:
        assert self.value is not None
        return self.value

    def update(self, value: tuple[Any, ...]) -> None:
        self.value = value


def _batch(state: FakeState, *parts: list[tuple[int, str, int]]) -> list[dict[str, Any]]:
    """One micro-batch of customer C1 in *parts* (Arrow batches of (created, number, points))."""
    frames = [
        pd.DataFrame(
            {
                "CustomerCardNo": ["C1"] * len(rows),
                "InvoiceNumber": [number for _, number, _ in rows],
                "CreatedTime": [created for created, _, _ in rows],
                "PointsEarned": [points for _, _, points in rows],
            }
        )
        for rows in parts
    ]
    out = list(running_totals(("C1",), iter(frames), state))  # type: ignore[arg-type]
    if not out:
        return []
    (frame,) = out
    assert list(frame.columns) == NOTIFICATION_COLUMNS
    rows: list[dict[str, Any]] = frame.to_dict("records")
    return rows


def test_points_run_on_in_time_order_across_batches() -> None:
    state = FakeState()
    # Out of order, and split over two Arrow batches: sorted by (time, number).
    first = _batch(state, [(20, "B", 3)], [(10, "A", 2), (20, "A2", 1)])
    assert first == [
        {"CustomerCardNo": "C1", "InvoiceNumber": "A", "CreatedTime": 10, "PointsEarned": 2,
         "TotalPoints": 2},
        {"CustomerCardNo": "C1", "InvoiceNumber": "A2", "CreatedTime": 20, "PointsEarned": 1,
         "TotalPoints": 3},
        {"CustomerCardNo": "C1", "InvoiceNumber": "B", "CreatedTime": 20, "PointsEarned": 3,
         "TotalPoints": 6},
    ]  # fmt: skip
    assert state.get == (6,)
    # A later batch goes on from the state, older invoices included.
    second = _batch(state, [(5, "Z", 4)])
    assert [(n["InvoiceNumber"], n["TotalPoints"]) for n in second] == [("Z", 10)]
    assert state.get == (10,)


def test_an_empty_batch_emits_nothing_and_keeps_the_state() -> None:
    state = FakeState()
    _batch(state, [(1, "A", 7)])
    assert _batch(state, []) == []
    assert state.get == (7,)
