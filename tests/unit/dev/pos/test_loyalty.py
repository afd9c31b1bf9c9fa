"""Loyalty notifications filled in from a micro-batch of the tables' records (pure unit tests)."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pytest

from sparkiq.dev.pos.loyalty import NOTIFICATION_COLUMNS, with_notifications
from sparkiq.dev.pos.tables import NOTE_TYPE

NOTE = pa.struct(
    [("card", pa.string()), ("t", pa.int64()), ("n", pa.string()), ("earned", pa.int64()),
     ("total", pa.int64())]
)  # fmt: skip


def _batch(rows: list[tuple[str, bytes | None, dict[str, Any] | None]]) -> pa.Table:
    """(topic, value, note) rows as the tables' query emits them (key: the note's card)."""
    return pa.table(
        {
            "topic": pa.array([topic for topic, _, _ in rows], pa.string()),
            "key": pa.array([(note or {}).get("card", "x").encode() for _, _, note in rows]),
            "value": pa.array([value for _, value, _ in rows], pa.binary()),
            "note": pa.array([note for _, _, note in rows], NOTE),
        }
    )


def _earned(card: str, t: int, n: str, points: int) -> dict[str, Any]:
    return {"card": card, "t": t, "n": n, "earned": points, "total": None}


def _total(card: str, total: int) -> dict[str, Any]:
    return {"card": card, "t": None, "n": None, "earned": None, "total": total}


def test_the_note_type_is_the_one_the_query_emits() -> None:
    assert (
        "struct<"
        + ", ".join(f"{f.name}: {'long' if f.type == pa.int64() else 'string'}" for f in NOTE)
        + ">"
        == NOTE_TYPE
    )


def test_running_totals_go_back_from_the_customers_total_in_time_order() -> None:
    out = with_notifications(
        _batch(
            [
                ("loyalty", None, _earned("C1", 20, "B", 3)),
                ("latest", b"{}", None),
                ("rewards", b'{"TotalPoints":16}', _total("C1", 16)),
                ("loyalty", None, _earned("C1", 10, "A", 2)),
                ("loyalty", None, _earned("C1", 20, "A2", 1)),
                ("loyalty", None, _earned("C2", 5, "Z", 4)),
                ("rewards", b'{"TotalPoints":4}', _total("C2", 4)),
            ]
        )
    )
    assert out.column_names == ["topic", "key", "value"]
    values = out.column("value").to_pylist()
    assert values[1:3] == [b"{}", b'{"TotalPoints":16}']  # other records as they were
    notes = [
        orjson.loads(v)
        for t, v in zip(out.column("topic").to_pylist(), values, strict=True)
        if t == "loyalty"
    ]
    # C1 had 10 points before the batch: A (10) -> 12, A2 (20, "A2" < "B") -> 13, B -> 16.
    assert [list(n) for n in notes] == [NOTIFICATION_COLUMNS] * 4
    assert [(n["InvoiceNumber"], n["PointsEarned"], n["TotalPoints"]) for n in notes] == [
        ("B", 3, 16), ("A", 2, 12), ("A2", 1, 13), ("Z", 4, 4)
    ]  # fmt: skip
    assert notes[0] == {
        "CustomerCardNo": "C1", "InvoiceNumber": "B", "CreatedTime": 20, "PointsEarned": 3,
        "TotalPoints": 16,
    }  # fmt: skip


def test_a_batch_without_notifications_is_unchanged_but_for_the_note() -> None:
    batch = _batch([("latest", b"1", None), ("rewards", b"2", _total("C1", 7))])
    out = with_notifications(batch)
    assert out.to_pydict() == batch.drop_columns(["note"]).to_pydict()


def test_a_notification_without_its_customers_total_is_an_error() -> None:
    with pytest.raises(ValueError, match="customer C9: 1 notifications"):
        with_notifications(_batch([("loyalty", None, _earned("C9", 1, "A", 1))]))
