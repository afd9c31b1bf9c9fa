"""The point-of-sale pipeline's invoice parsing.

The whole pipeline is checked against the oracle in `tests/e2e/test_pos.py`; these tests pin the
pieces whose mistakes would be slow or subtle there: which reason a bad record gets, and that
each invoice is parsed once per query. The tables and the notifications: `test_tables.py`,
`test_loyalty.py`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sparkiq.core.errors import ConfigError
from sparkiq.dev.pos import pipeline as pos
from sparkiq.dev.pos.generator import InvoiceGenerator

pytest_plugins = ["tests.support.spark"]

GOOD: dict[str, Any] = next(iter(InvoiceGenerator(3).invoices(1, start_ms=0)))


def _with(**fields: Any) -> bytes:
    return json.dumps({**GOOD, **fields}).encode()


REASONS: list[tuple[bytes | None, str | None]] = [
    (json.dumps(GOOD).encode(), None),
    (None, "empty value"),
    (b"", "not a JSON document"),
    (b'{"InvoiceNumber": 17,', "not a JSON document"),
    (b"abc", "not a JSON document"),
    (b"[1,2]", "missing or invalid field InvoiceNumber"),
    (b"{}", "missing or invalid field InvoiceNumber"),
    (_with(CreatedTime="yesterday"), "missing or invalid field CreatedTime"),
    (_with(TotalAmount="a lot"), "missing or invalid field TotalAmount"),
    (_with(StoreID=None), "missing or invalid field StoreID"),
    (_with(InvoiceLineItems="none"), "missing or invalid field InvoiceLineItems"),
    (_with(InvoiceLineItems=[]), "no line items"),
    (_with(NumberOfItems="many"), None),  # not a field the pipeline needs
]


def _raw(spark: Any, values: list[bytes | None]) -> Any:
    df = spark.createDataFrame([(v,) for v in values], "value binary")
    return df.selectExpr(
        "cast(null as binary) key", "value", "'pos' topic", "0 partition", "0L offset"
    )


def test_each_bad_record_gets_the_reason_that_names_what_is_wrong(spark: Any) -> None:
    values = [value for value, _ in REASONS]
    rows = pos.parse_invoices(_raw(spark, values)).select("reason").collect()
    assert [row.reason for row in rows] == [reason for _, reason in REASONS]


# Records broken where the tables' narrower schema does not look, or only partly.
OUTSIDE_THE_TABLES: list[tuple[bytes, str | None]] = [
    (_with(DeliveryAddress=5), None),
    (_with(DeliveryAddress={"City": ["x"], "PinCode": {"a": 1}}), None),
    (_with(InvoiceLineItems=[{**GOOD["InvoiceLineItems"][0], "ItemPrice": "free"}]), None),
    (_with(PosID=[1, 2], CGST="none", PaymentMethod={"a": [1]}), None),
    (_with(InvoiceLineItems=[7, "x", None]), "missing or invalid field InvoiceLineItems"),
]


def test_the_narrower_schemas_keep_and_name_exactly_what_the_whole_one_does(spark: Any) -> None:
    cases = REASONS + OUTSIDE_THE_TABLES
    values = [value for value, _ in cases]
    expected = [reason for _, reason in cases]
    for schema in (pos.INVOICE_SCHEMA, pos.ROUTES_SCHEMA, pos.TABLES_SCHEMA):
        rows = pos.parse_invoices(_raw(spark, values), schema).select("reason").collect()
        assert [row.reason for row in rows] == expected, schema
    kept = pos.valid_invoices(pos.parse_invoices(_raw(spark, values), pos.TABLES_SCHEMA))
    assert set(kept.columns) == {"value", *pos.REQUIRED}


def test_the_routes_schema_gives_the_records_the_whole_one_gives(spark: Any) -> None:
    # Good invoices (with and without a delivery address), broken ones, and ones broken only
    # in fields the routes leave out or carry as they are.
    values = [value for value, _ in REASONS + OUTSIDE_THE_TABLES]
    address = {"AddressLine": "12 Market Road", "City": "Pune", "State": "Maharashtra"}
    address |= {"PinCode": "411001", "ContactNumber": "9123456789"}
    values.append(_with(DeliveryType="HOME-DELIVERY", DeliveryAddress=address))
    values.append(_with(CashierID=[1], CGST="none", TaxableAmount={"x": 1}))

    def records(schema: str) -> list[Any]:
        parsed = pos.parse_invoices(_raw(spark, values), schema)
        rows = pos._routes(parsed, pos.DEFAULT_TOPICS).collect()
        return sorted(rows, key=lambda r: (r.topic, r.key or b"", r.value or b""))

    whole = records(pos.INVOICE_SCHEMA)
    assert len(whole) > len(values)  # line items, shipments and dead letters
    assert records(pos.ROUTES_SCHEMA) == whole


def test_each_invoice_is_parsed_once_when_the_valid_ones_are_kept(spark: Any) -> None:
    invoices = pos.parse_invoices(_raw(spark, [json.dumps(GOOD).encode()]))
    kept = invoices.where("reason is null").select("inv.*")
    plan = kept._jdf.queryExecution().executedPlan().toString()
    assert plan.count("from_json(") == 1, plan
    assert kept.count() == 1


def test_the_routes_read_as_much_more_per_micro_batch_as_their_trigger_is_longer() -> None:
    # The default triggers: a routes batch every 2 s, a tables one every 250 ms.
    assert pos.routes_cap(20_000, pos.ROUTES_TRIGGER, pos.TABLES_TRIGGER) == 160_000
    assert pos.routes_cap(20_000, "1 second", "1 second") == 20_000
    assert pos.routes_cap(20_000, "100 ms", "1 second") == 20_000  # never below the cap
    assert pos.routes_cap(None, pos.ROUTES_TRIGGER, pos.TABLES_TRIGGER) is None
    with pytest.raises(ConfigError, match="duration"):
        pos.routes_cap(20_000, "soon", pos.TABLES_TRIGGER)


def test_the_tables_and_their_changelog_topics() -> None:
    tables = pos.pos_tables("shop", 4)
    assert list(tables) == ["stores", "rewards", "latest-invoice", "store-sales"]
    assert {t.topic for t in tables.values()} == {f"shop.table.{name}" for name in tables}
    assert {t.partitions for t in tables.values()} == {4}
    assert [t.kind.value for t in tables.values()] == ["global", "kv", "kv", "windowed"]
    assert tables["store-sales"].window_size_ms == 60_000
    assert tables["store-sales"].retention_ms == 3_600_000
