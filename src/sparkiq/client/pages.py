"""Paged reads of the Python client: the query of a range or of windows, and its pages.

`paged` follows `next_cursor` from page to page and yields every item. Times (`from_`,
`to`) are epoch ms (int), a `datetime` (naive: UTC), or text as the API takes it (ISO-8601,
or relative to now such as `-15m`: `sparkiq.core.timespec`). Relative times are turned into
epoch ms here, once, by the client's clock, so every page of one read has the same bounds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import orjson

from sparkiq.core.errors import ClientError, FormatError
from sparkiq.core.timespec import now_ms, parse_time

Time = int | str | datetime


def key_text(key: object) -> str:
    """A key as a path or a parameter writes it."""
    if isinstance(key, bytes):
        return key.decode()
    if isinstance(key, (dict, list)):
        return orjson.dumps(key).decode()
    return str(key)


def time_text(value: Time, now: int) -> str:
    """`value` as epoch ms for a query (`now`: what relative times count from)."""
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return str(int(moment.timestamp() * 1000))
    if isinstance(value, int):
        return str(value)
    try:
        return str(parse_time(value, now))
    except FormatError as exc:
        raise ClientError(str(exc)) from None


def page_query(
    from_: Time | None,
    to: Time | None,
    order: str,
    page_size: int | None,
    /,
    **keys: object | None,
) -> dict[str, str]:
    """The parameters of a paged read: times, order, page size, and key bounds `keys`."""
    if order not in ("asc", "desc"):
        raise ClientError(f"order={order!r}; give 'asc' or 'desc'")
    now = now_ms()
    params = {"order": order}
    if page_size is not None:
        params["limit"] = str(page_size)
    for name, value in (("from", from_), ("to", to)):
        if value is not None:
            params[name] = time_text(value, now)
    for name, key in keys.items():
        if key is not None:
            params[name] = key_text(key)
    return params


def paged(
    fetch: Callable[[dict[str, str]], dict[str, Any] | None], params: dict[str, str]
) -> Iterator[dict[str, Any]]:
    """Every item of the pages `fetch` reads for `params`, following `next_cursor`."""
    query = dict(params)
    while True:
        page = fetch(query)
        assert page is not None  # reads that are never 404 for an absent key
        yield from page["items"]
        cursor = page.get("next_cursor")
        if not cursor:
            return
        query["cursor"] = cursor
