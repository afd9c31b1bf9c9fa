"""Generates realistic point-of-sale invoices, seeded, at a chosen rate.

An invoice is keyed by its store id and carries the customer (PRIME or NONPRIME, with a
loyalty card number), payment, delivery (HOME-DELIVERY with an address, or TAKEAWAY) and
1-5 line items. The same seed gives the same invoices, so tests can compute an oracle.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import Producer

from sparkiq.core.errors import KafkaError
from sparkiq.kafka.clientlog import LOG_CONF

Invoice = dict[str, Any]

_CITIES = [
    ("Mumbai", "Maharashtra", "400001"),
    ("Pune", "Maharashtra", "411001"),
    ("Bengaluru", "Karnataka", "560001"),
    ("Chennai", "Tamil Nadu", "600001"),
    ("Kolkata", "West Bengal", "700001"),
    ("Hyderabad", "Telangana", "500001"),
    ("Jaipur", "Rajasthan", "302001"),
    ("Kochi", "Kerala", "682001"),
]
_ITEMS = [
    ("458", "Wine glass", 1644.0),
    ("283", "Portable Lamps", 2236.0),
    ("183", "Coffee mug", 249.0),
    ("921", "Bath towel", 599.0),
    ("377", "Blender", 3499.0),
    ("610", "Cutting board", 450.0),
    ("712", "Desk organizer", 899.0),
    ("805", "Table cloth", 1299.0),
    ("114", "Tea kettle", 1899.0),
    ("532", "Photo frame", 349.0),
]


DEFAULT_STORES = 8


def store_ids(count: int = DEFAULT_STORES) -> list[str]:
    """The ids of the first *count* stores (the generator's `stores`)."""
    return [f"STR{1000 + i * 37}" for i in range(count)]


def store_directory(count: int = DEFAULT_STORES) -> list[dict[str, str]]:
    """Reference data of the first *count* stores: id, name, city and state (the `stores`
    global table of the pipeline)."""
    out = []
    for i, store in enumerate(store_ids(count)):
        city, state, _ = _CITIES[i % len(_CITIES)]
        branch = "" if i < len(_CITIES) else f" {i // len(_CITIES) + 1}"
        out.append(
            {"StoreID": store, "Name": f"{city} Central{branch}", "City": city, "State": state}
        )
    return out


@dataclass(frozen=True, slots=True)
class Customer:
    card_no: str
    kind: str  # PRIME or NONPRIME
    phone: str


class InvoiceGenerator:
    """Seeded invoices over a fixed set of stores, POS terminals and customers."""

    def __init__(
        self, seed: int = 1, *, stores: int = DEFAULT_STORES, customers: int = 200
    ) -> None:
        self._rng = random.Random(seed)
        self._next_number = 0
        self.stores = store_ids(stores)
        self.customers = [
            Customer(
                card_no=f"{self._rng.randrange(10**15, 10**16)}",
                kind="PRIME" if self._rng.random() < 0.4 else "NONPRIME",
                phone=f"9{self._rng.randrange(10**8, 10**9)}",
            )
            for _ in range(customers)
        ]

    def invoice(self, created_ms: int) -> Invoice:
        rng = self._rng
        self._next_number += 1
        store = rng.choice(self.stores)
        customer = rng.choice(self.customers)
        lines: list[dict[str, Any]] = []
        for code, desc, price in rng.sample(_ITEMS, rng.randint(1, 5)):
            qty = rng.randint(1, 3)
            lines.append(
                {
                    "ItemCode": code,
                    "ItemDescription": desc,
                    "ItemPrice": price,
                    "ItemQty": qty,
                    "TotalValue": round(price * qty, 2),
                }
            )
        total = round(sum(float(line["TotalValue"]) for line in lines), 2)
        taxable = total
        delivery = "HOME-DELIVERY" if rng.random() < 0.3 else "TAKEAWAY"
        city, state, pin = rng.choice(_CITIES)
        return {
            "InvoiceNumber": f"INV{self._next_number:08d}",
            "CreatedTime": created_ms,
            "StoreID": store,
            "PosID": f"POS{rng.randint(1, 9)}",
            "CashierID": f"OAS{rng.randint(100, 999)}",
            "CustomerType": customer.kind,
            "CustomerCardNo": customer.card_no,
            "TotalAmount": total,
            "NumberOfItems": len(lines),
            "PaymentMethod": rng.choice(["CASH", "CARD"]),
            "TaxableAmount": taxable,
            "CGST": round(taxable * 0.025, 2),
            "SGST": round(taxable * 0.025, 2),
            "CESS": round(taxable * 0.0025, 2),
            "DeliveryType": delivery,
            "DeliveryAddress": (
                {
                    "AddressLine": f"{rng.randint(1, 300)} Market Road",
                    "City": city,
                    "State": state,
                    "PinCode": pin,
                    "ContactNumber": customer.phone,
                }
                if delivery == "HOME-DELIVERY"
                else None
            ),
            "InvoiceLineItems": lines,
        }

    def invoices(self, count: int, *, start_ms: int, step_ms: int = 50) -> Iterator[Invoice]:
        for i in range(count):
            yield self.invoice(start_ms + i * step_ms)


def produce_invoices(
    bootstrap: str,
    topic: str,
    invoices: Iterable[Invoice],
    *,
    rate_per_s: float | None = None,
    malformed_every: int = 0,
    on_record: Callable[[int], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> list[Invoice]:
    """Write invoices keyed by store id; optionally a malformed record every N invoices.

    Returns the invoices written (malformed records are not invoices and not returned).
    """
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",
            "linger.ms": 10,
            **LOG_CONF,
        }
    )
    written: list[Invoice] = []
    started = time.monotonic()
    for inv in invoices:
        if stop is not None and stop():
            break
        producer.produce(topic, key=inv["StoreID"].encode(), value=orjson.dumps(inv))
        written.append(inv)
        if malformed_every and len(written) % malformed_every == 0:
            producer.produce(topic, key=inv["StoreID"].encode(), value=b'{"InvoiceNumber": 17,')
        if on_record is not None:
            on_record(len(written))
        if rate_per_s:
            ahead = len(written) / rate_per_s - (time.monotonic() - started)
            if ahead > 0:
                producer.poll(0)
                time.sleep(ahead)
        elif len(written) % 2000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0:
        raise KafkaError(f"not every invoice reached topic {topic!r} on {bootstrap}")
    return written


def produce_one(bootstrap: str, topic: str, invoice: Invoice) -> tuple[int, int]:
    """Write one invoice and wait for Kafka to take it: its (partition, offset), what a
    read of the tables with ``after_source=TOPIC:PARTITION:OFFSET`` names."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", **LOG_CONF}
    )
    where: list[tuple[int, int]] = []
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            where.append((msg.partition(), msg.offset()))

    producer.produce(
        topic, key=invoice["StoreID"].encode(), value=orjson.dumps(invoice), on_delivery=delivered
    )
    producer.flush(30)
    if not where:
        reason = failed[0] if failed else "not acknowledged within 30s"
        raise KafkaError(f"invoice {invoice['InvoiceNumber']} did not reach {topic!r}: {reason}")
    return where[0]
