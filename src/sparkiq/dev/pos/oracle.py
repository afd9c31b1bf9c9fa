"""Every output of the point-of-sale pipeline, computed in plain Python from the invoices.

The end-to-end tests produce seeded invoices (`sparkiq.dev.pos.generator`), let
`sparkiq.dev.pos.pipeline` process them, and compare what the topics and the serving nodes hold
with what this module computes. Numbers follow the pipeline's types: amounts are exact
decimals of two places (JSON numbers in the outputs, compared as the floats a JSON parser
gives), points are integers.

The loyalty notifications' running totals depend on the order in which Spark sees one
customer's invoices, which arrive on different partitions; `check_notifications` therefore
checks what must hold whatever that order: each invoice notified once with the right
points, and the totals of each customer forming one running sum ending at the oracle total.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sparkiq.dev.pos.tables import POINTS_PER

Invoice = Mapping[str, Any]
WINDOW_MS = 60_000
_LINE_FIELDS = ("ItemCode", "ItemDescription", "ItemPrice", "ItemQty", "TotalValue")
_ADDRESS_FIELDS = ("City", "State", "PinCode")
_INVOICE_FIELDS = (
    "InvoiceNumber",
    "CreatedTime",
    "StoreID",
    "PosID",
    "CustomerType",
    "PaymentMethod",
    "DeliveryType",
)


def _decimal(amount: float | int | str) -> Decimal:
    return Decimal(repr(amount) if isinstance(amount, float) else str(amount))


def points_for(invoice: Invoice) -> int:
    """Points an invoice earns: floor(TotalAmount / POINTS_PER)."""
    return int(_decimal(invoice["TotalAmount"]) // POINTS_PER)


def masked_lines(invoice: Invoice) -> list[dict[str, Any]]:
    """The `hadoop-sink` records of *invoice*: one per line item, no card or phone number.

    Fields that are null (the address of a TAKEAWAY invoice) are absent, as Spark's to_json
    writes them.
    """
    base: dict[str, Any] = {name: invoice[name] for name in _INVOICE_FIELDS}
    address = invoice.get("DeliveryAddress") or {}
    for name in _ADDRESS_FIELDS:
        if address.get(name) is not None:
            base[name] = address[name]
    return [
        {**base, **{name: item[name] for name in _LINE_FIELDS}}
        for item in invoice["InvoiceLineItems"]
    ]


@dataclass
class PosOracle:
    """The expected contents of every topic and table the pipeline writes."""

    shipments: list[tuple[str, Invoice]] = field(default_factory=list)
    hadoop: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # customer -> {invoice number: points earned}
    earned: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    rewards: dict[str, dict[str, Any]] = field(default_factory=dict)
    latest_invoice: dict[str, Invoice] = field(default_factory=dict)
    # (store, window start ms) -> {"Sales": float, "Invoices": int}
    store_sales: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, invoices: Iterable[Invoice]) -> PosOracle:
        oracle = cls()
        latest_order: dict[str, tuple[int, str]] = {}
        sales: dict[tuple[str, int], Decimal] = defaultdict(Decimal)
        counts: dict[tuple[str, int], int] = defaultdict(int)
        for inv in invoices:
            customer = str(inv["CustomerCardNo"])
            if inv["DeliveryType"] == "HOME-DELIVERY":
                oracle.shipments.append((str(inv["StoreID"]), inv))
            oracle.hadoop.extend((str(inv["InvoiceNumber"]), line) for line in masked_lines(inv))
            if inv["CustomerType"] == "PRIME":
                oracle.earned[customer][str(inv["InvoiceNumber"])] = points_for(inv)
            order = (int(inv["CreatedTime"]), str(inv["InvoiceNumber"]))
            if customer not in latest_order or order > latest_order[customer]:
                latest_order[customer] = order
                oracle.latest_invoice[customer] = inv
            window = (str(inv["StoreID"]), int(inv["CreatedTime"]) // WINDOW_MS * WINDOW_MS)
            sales[window] += _decimal(inv["TotalAmount"])
            counts[window] += 1
        oracle.rewards = {
            customer: {"CustomerCardNo": customer, "TotalPoints": sum(points.values())}
            for customer, points in oracle.earned.items()
        }
        oracle.store_sales = {
            window: {"Sales": float(total), "Invoices": counts[window]}
            for window, total in sales.items()
        }
        return oracle


def check_notifications(oracle: PosOracle, notifications: Sequence[Mapping[str, Any]]) -> list[str]:
    """What is wrong with the loyalty notifications read back (empty when all is well).

    Identical duplicates (a micro-batch written again after a restart) count once.
    """
    problems: list[str] = []
    seen: dict[tuple[str, str], Mapping[str, Any]] = {}
    for n in notifications:
        ident = (str(n["CustomerCardNo"]), str(n["InvoiceNumber"]))
        if ident in seen and seen[ident] != n:
            problems.append(f"invoice {ident[1]} notified twice, differently: {seen[ident]} {n}")
        seen[ident] = n
    by_customer: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for (customer, _), n in seen.items():
        by_customer[customer].append(n)
    for customer in sorted(set(by_customer) | set(oracle.earned)):
        got = by_customer.get(customer, [])
        want = oracle.earned.get(customer, {})
        got_points = {str(n["InvoiceNumber"]): int(n["PointsEarned"]) for n in got}
        if got_points != want:
            problems.append(
                f"customer {customer}: notified {len(got_points)} invoices, expected "
                f"{len(want)}; differing: "
                f"{sorted(set(got_points.items()) ^ set(want.items()))[:5]}"
            )
            continue
        running = 0
        for n in sorted(got, key=lambda n: (int(n["TotalPoints"]), str(n["InvoiceNumber"]))):
            running += int(n["PointsEarned"])
            if int(n["TotalPoints"]) != running:
                problems.append(
                    f"customer {customer}: invoice {n['InvoiceNumber']} carries total "
                    f"{n['TotalPoints']}, but the running sum there is {running}"
                )
                break
    return problems
