"""What a POS table may answer while invoices still arrive: every value the oracle allows.

The pipeline's tables query reads each source partition in offset order, a micro-batch at a
time, so a table reflects, per source partition, the invoices up to some offset: a prefix of
each partition. A key's answer is right when some choice of one prefix per partition gives
that value (`sparkiq.dev.pos.oracle` computes what a set of invoices gives). Invoices below
*floor* (per partition, the positions every node was seen to hold before the test disturbed
anything) are in every answer: no answer may go back before them.

- ``rewards`` (customer -> total points): a sum of prefix sums of the customer's points, one
  prefix per partition; absent only while no invoice of a PRIME customer is in.
- ``latest-invoice`` (customer -> latest invoice): the latest invoice of the chosen prefixes.
- ``store-sales`` (store -> windows): a store's invoices share a partition (the source is
  keyed by store), so its windows are those of one prefix of them, of as many invoices as
  the answer's windows count.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkiq.dev.pos.generator import Invoice
from sparkiq.dev.pos.oracle import PosOracle, points_for


@dataclass(frozen=True)
class Delivered:
    """An invoice and where Kafka put it."""

    invoice: Invoice
    partition: int
    offset: int


def _order(invoice: Invoice) -> tuple[int, str]:
    """How `PosOracle` picks a customer's latest invoice."""
    return int(invoice["CreatedTime"]), str(invoice["InvoiceNumber"])


@dataclass
class _Prefixes:
    """One key's invoices per source partition, in offset order, and how many are in for sure."""

    runs: dict[int, list[Invoice]] = field(default_factory=lambda: defaultdict(list))
    floor: dict[int, int] = field(default_factory=lambda: defaultdict(int))

    def choices(self) -> list[tuple[list[Invoice], int]]:
        """Per partition: its invoices and the least prefix length an answer may reflect."""
        return [(run, self.floor[p]) for p, run in sorted(self.runs.items())]


class PosHistory:
    """The values each key of the POS tables may have had, from the invoices delivered."""

    def __init__(self, delivered: Sequence[Delivered], floor: Mapping[int, int]) -> None:
        """*floor*: source partition -> offset below which every invoice is in every answer."""
        ordered = sorted(delivered, key=lambda d: (d.partition, d.offset))
        self._customers: dict[str, _Prefixes] = defaultdict(_Prefixes)
        self._stores: dict[str, _Prefixes] = defaultdict(_Prefixes)
        self._prime: set[str] = set()
        for d in ordered:
            card, store = str(d.invoice["CustomerCardNo"]), str(d.invoice["StoreID"])
            if d.invoice["CustomerType"] == "PRIME":
                self._prime.add(card)
            for prefixes in (self._customers[card], self._stores[store]):
                prefixes.runs[d.partition].append(d.invoice)
                if d.offset < floor.get(d.partition, 0):
                    prefixes.floor[d.partition] += 1
        self._rewards: dict[str, set[int | None]] = {}
        self._latest: dict[str, set[str | None]] = {}
        self._sales: dict[tuple[str, int], dict[int, Any]] = {}

    @property
    def customers(self) -> list[str]:
        return sorted(self._customers)

    @property
    def prime_customers(self) -> list[str]:
        return sorted(self._prime)

    @property
    def stores(self) -> list[str]:
        return sorted(self._stores)

    def rewards(self, card: str) -> set[int | None]:
        """The totals the customer's `rewards` may show (None: absent)."""
        if card not in self._rewards:
            sums: set[tuple[int, bool]] = {(0, False)}  # (points, any PRIME invoice in)
            for run, least in self._customers[card].choices():
                options: set[tuple[int, bool]] = set()
                total, prime = 0, False
                for k, invoice in enumerate([None, *run]):
                    if invoice is not None:
                        total += points_for(invoice) if invoice["CustomerType"] == "PRIME" else 0
                        prime = prime or invoice["CustomerType"] == "PRIME"
                    if k >= least:
                        options.add((total, prime))
                sums = {(a + b, p or q) for a, p in sums for b, q in options}
            self._rewards[card] = {total if prime else None for total, prime in sums}
        return self._rewards[card]

    def latest(self, card: str) -> set[str | None]:
        """The invoice numbers the customer's `latest-invoice` may show (None: absent)."""
        if card not in self._latest:
            best: set[tuple[int, str] | None] = {None}
            for run, least in self._customers[card].choices():
                options: set[tuple[int, str] | None] = set()
                top: tuple[int, str] | None = None
                for k, invoice in enumerate([None, *run]):
                    if invoice is not None and (top is None or _order(invoice) > top):
                        top = _order(invoice)
                    if k >= least:
                        options.add(top)
                best = {_max(a, b) for a in best for b in options}
            self._latest[card] = {None if b is None else b[1] for b in best}
        return self._latest[card]

    def invoice(self, card: str, number: str) -> Invoice:
        for run in self._customers[card].runs.values():
            for invoice in run:
                if invoice["InvoiceNumber"] == number:
                    return invoice
        raise KeyError(number)

    def sales(self, store: str, invoices: int) -> dict[int, Any] | None:
        """The store's windows after its first *invoices* invoices, None if no answer may
        reflect that many (fewer than are in for sure, or more than were delivered)."""
        ((partition, run),) = self._stores[store].runs.items()
        if not self._stores[store].floor[partition] <= invoices <= len(run):
            return None
        if (store, invoices) not in self._sales:
            oracle = PosOracle.of(run[:invoices])
            self._sales[(store, invoices)] = {s: v for (_, s), v in oracle.store_sales.items()}
        return self._sales[(store, invoices)]

    def wrong(self, table: str, key: str, value: Any) -> str | None:
        """Why *value* (None: absent) cannot be an answer of *table* for *key*, or None."""
        if table == "rewards":
            total = None if value is None else value.get("TotalPoints")
            if value is not None and value != {"CustomerCardNo": key, "TotalPoints": total}:
                return f"rewards {key}: {value} is not a customer's total"
            if total not in self.rewards(key):
                return f"rewards {key}: {total}, allowed {sorted(map(str, self.rewards(key)))}"
            return None
        if table == "latest-invoice":
            number = None if value is None else value.get("InvoiceNumber")
            if number not in self.latest(key):
                return f"latest-invoice {key}: {number}, allowed {self.latest(key)}"
            if value is not None and value != self.invoice(key, str(number)):
                return f"latest-invoice {key}: {number} differs from the invoice produced"
            return None
        if table == "store-sales":
            windows: dict[int, Any] = value or {}
            count = sum(int(w.get("Invoices", 0)) for w in windows.values())
            want = self.sales(key, count)
            if want != windows:
                return f"store-sales {key}: {windows} is no prefix of its invoices ({want})"
            return None
        raise ValueError(f"no history of table {table!r}")


def _max(a: tuple[int, str] | None, b: tuple[int, str] | None) -> tuple[int, str] | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)
