"""The values the broker-failover test allows a POS table to answer while invoices arrive
(`tests.support.poshistory`): exactly those of one prefix per source partition, never
behind the floor."""

from __future__ import annotations

from typing import Any

from sparkiq.dev.pos.oracle import PosOracle
from tests.support.poshistory import Delivered, PosHistory

CARD = "4000000000000001"


def invoice(n: int, total: float, store: str, *, prime: bool = True, t: int = 0) -> dict[str, Any]:
    return {
        "InvoiceNumber": f"INV{n:08d}",
        "CreatedTime": t or n * 1_000,
        "StoreID": store,
        "CustomerType": "PRIME" if prime else "NONPRIME",
        "CustomerCardNo": CARD,
        "TotalAmount": total,
        "DeliveryType": "TAKEAWAY",
        "PosID": "POS1",
        "PaymentMethod": "CASH",
        "InvoiceLineItems": [
            {
                "ItemCode": "1",
                "ItemDescription": "Mug",
                "ItemPrice": total,
                "ItemQty": 1,
                "TotalValue": total,
            }
        ],
    }


# Partition 0 holds store A's invoices, partition 1 store B's: 100 and 50 points, then 10
# points and 7 points (a NONPRIME one: none).
DELIVERED = [
    Delivered(invoice(1, 5_000.0, "A"), 0, 0),
    Delivered(invoice(2, 2_500.0, "B"), 1, 0),
    Delivered(invoice(3, 500.0, "A"), 0, 1),
    Delivered(invoice(4, 350.0, "B", prime=False), 1, 1),
]


def test_rewards_are_sums_of_one_prefix_per_partition() -> None:
    history = PosHistory(DELIVERED, floor={})
    assert history.rewards(CARD) == {None, 100, 110, 50, 150, 160}
    assert history.wrong("rewards", CARD, {"CustomerCardNo": CARD, "TotalPoints": 160}) is None
    assert history.wrong("rewards", CARD, None) is None
    # 10 points alone would need invoice 3 without invoice 1 before it on its partition.
    assert history.wrong("rewards", CARD, {"CustomerCardNo": CARD, "TotalPoints": 10})


def test_the_floor_rules_out_going_back() -> None:
    history = PosHistory(DELIVERED, floor={0: 1, 1: 1})  # invoices 1 and 2 in for sure
    assert history.rewards(CARD) == {150, 160}
    assert history.wrong("rewards", CARD, None)
    assert history.latest(CARD) == {"INV00000002", "INV00000003", "INV00000004"}
    assert history.wrong("latest-invoice", CARD, None)


def test_latest_invoice_is_the_latest_of_the_prefixes_and_whole() -> None:
    history = PosHistory(DELIVERED, floor={})
    assert history.latest(CARD) == {None, *(f"INV0000000{n}" for n in (1, 2, 3, 4))}
    late = invoice(5, 10.0, "A", t=500)  # created before invoice 1, delivered after it
    history = PosHistory([*DELIVERED, Delivered(late, 0, 2)], floor={0: 1})
    assert "INV00000005" not in history.latest(CARD)
    assert history.wrong("latest-invoice", CARD, DELIVERED[3].invoice) is None
    changed = {**DELIVERED[3].invoice, "TotalAmount": 1.0}
    assert history.wrong("latest-invoice", CARD, changed)


def test_store_sales_are_a_prefix_of_the_stores_invoices() -> None:
    history = PosHistory(DELIVERED, floor={0: 1})
    first = PosOracle.of([DELIVERED[0].invoice]).store_sales
    windows = {start: value for (_, start), value in first.items()}
    assert history.wrong("store-sales", "A", windows) is None
    assert history.wrong("store-sales", "A", {}), "behind the floor"
    both = {
        s: v
        for (_, s), v in PosOracle.of(
            [DELIVERED[0].invoice, DELIVERED[2].invoice]
        ).store_sales.items()
    }
    assert history.wrong("store-sales", "A", both) is None
    assert history.wrong("store-sales", "A", {0: {"Sales": 1.0, "Invoices": 1}})
