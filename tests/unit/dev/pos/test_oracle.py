"""The plain-Python oracle of the point-of-sale pipeline, and its notification checks."""

from __future__ import annotations

from typing import Any

from sparkiq.dev.pos.generator import InvoiceGenerator
from sparkiq.dev.pos.oracle import PosOracle, check_notifications, masked_lines, points_for


def invoices(n: int = 400) -> list[dict[str, Any]]:
    return list(InvoiceGenerator(5, stores=3, customers=20).invoices(n, start_ms=0, step_ms=1_000))


def test_points_are_whole_and_rounded_down() -> None:
    assert points_for({"TotalAmount": 49.99}) == 0
    assert points_for({"TotalAmount": 50.0}) == 1
    assert points_for({"TotalAmount": 4932.15}) == 98


def test_lines_are_flattened_and_masked() -> None:
    inv = next(i for i in invoices() if i["DeliveryType"] == "HOME-DELIVERY")
    lines = masked_lines(inv)
    assert len(lines) == len(inv["InvoiceLineItems"])
    for line in lines:
        assert "CustomerCardNo" not in line
        assert "ContactNumber" not in line
        assert line["City"] == inv["DeliveryAddress"]["City"]
    takeaway = next(i for i in invoices() if i["DeliveryType"] == "TAKEAWAY")
    assert all("City" not in line for line in masked_lines(takeaway))


def test_tables_follow_the_invoices() -> None:
    data = invoices()
    oracle = PosOracle.of(data)
    prime = {i["CustomerCardNo"] for i in data if i["CustomerType"] == "PRIME"}
    assert set(oracle.rewards) == prime
    for customer, reward in oracle.rewards.items():
        mine = [i for i in data if i["CustomerCardNo"] == customer]
        assert reward["TotalPoints"] == sum(points_for(i) for i in mine)
    for customer, latest in oracle.latest_invoice.items():
        mine = [i for i in data if i["CustomerCardNo"] == customer]
        assert latest is max(mine, key=lambda i: (i["CreatedTime"], i["InvoiceNumber"]))
    assert sum(v["Invoices"] for v in oracle.store_sales.values()) == len(data)
    assert all(start % 60_000 == 0 for _, start in oracle.store_sales)
    assert len(oracle.shipments) == sum(i["DeliveryType"] == "HOME-DELIVERY" for i in data)


def _notifications(oracle: PosOracle, data: list[dict[str, Any]]) -> list[dict[str, Any]]:
    totals: dict[str, int] = {}
    out = []
    for inv in data:
        if inv["CustomerType"] != "PRIME":
            continue
        c = inv["CustomerCardNo"]
        totals[c] = totals.get(c, 0) + points_for(inv)
        out.append(
            {
                "CustomerCardNo": c,
                "InvoiceNumber": inv["InvoiceNumber"],
                "CreatedTime": inv["CreatedTime"],
                "PointsEarned": points_for(inv),
                "TotalPoints": totals[c],
            }
        )
    return out


def test_notification_check_accepts_any_order_and_identical_replays() -> None:
    data = invoices()
    oracle = PosOracle.of(data)
    notes = _notifications(oracle, data)
    assert check_notifications(oracle, notes) == []
    assert check_notifications(oracle, list(reversed(notes)) + notes[:10]) == []


def test_notification_check_catches_lost_and_double_counted_points() -> None:
    data = invoices()
    oracle = PosOracle.of(data)
    notes = _notifications(oracle, data)
    assert check_notifications(oracle, notes[1:]) != []  # one invoice lost
    doubled = [dict(n) for n in notes]
    first = doubled[0]["CustomerCardNo"]
    for n in doubled:
        if n["CustomerCardNo"] == first and n is not doubled[0]:
            n["TotalPoints"] += doubled[0]["PointsEarned"]  # counted twice from here on
    assert check_notifications(oracle, doubled) != []
    changed = [dict(n) for n in notes]
    changed[0]["TotalPoints"] += 1
    assert check_notifications(oracle, notes + changed[:1]) != []  # a differing replay
