"""`sparkiq range` and `sparkiq windows`: paged reads printed as JSON lines.

Both read through `sparkiq.Client` (routed to the node holding most of the table, or a
key's owner), follow cursors page by page, and print one JSON line per item until the end
or `--limit` items. Times (`--from`, `--to` of windows) are epoch ms, ISO-8601 or relative
to now (`-15m`), turned into epoch ms once, so every page reads the same bounds.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson

from sparkiq.cli.common import credential_options, run_command, url_option

if TYPE_CHECKING:
    from sparkiq.client import Client

_ORDER = click.Choice(["asc", "desc"])


def _print_items(
    read: Callable[[Client], Iterable[Any]],
    urls: tuple[str, ...],
    limit: int | None,
    token: str | None,
    api_key: str | None,
    ca_file: Path | None,
) -> None:
    """Print each item of a client's paged `read` as a JSON line, at most `limit`."""
    from sparkiq.client import Client

    def run() -> None:
        with Client(
            list(urls), token=token, api_key=api_key, ca_file=ca_file, wait_for_unreachable=False
        ) as client:
            for item in itertools.islice(read(client), limit):
                click.echo(orjson.dumps(item).decode())

    run_command(run)


@click.command(name="range")
@click.argument("table_name", metavar="TABLE")
@click.option("--prefix", default=None, help="Only keys that start with this one.")
@click.option("--from", "from_", default=None, help="Smallest key (inclusive).")
@click.option("--to", default=None, help="Largest key (inclusive).")
@click.option("--order", type=_ORDER, default="asc", show_default=True, help="Key order.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Stop after N items.")
@click.option("--page-size", type=click.IntRange(min=1), default=500, show_default=True)
@url_option()
@credential_options
def range_command(
    table_name: str,
    prefix: str | None,
    from_: str | None,
    to: str | None,
    order: str,
    limit: int | None,
    page_size: int,
    urls: tuple[str, ...],
    token: str | None,
    api_key: str | None,
    ca_file: Path | None,
) -> None:
    """Print TABLE's entries in key order, one JSON line {"key", "value"} each."""

    def read(client: Client) -> Iterable[dict[str, Any]]:
        entries = client.range(
            table_name, from_=from_, to=to, prefix=prefix, page_size=page_size, order=order
        )
        return ({"key": key, "value": value} for key, value in entries)

    _print_items(read, urls, limit, token, api_key, ca_file)


@click.command()
@click.argument("table_name", metavar="TABLE")
@click.argument("key", required=False)
@click.option("--from", "from_", default=None, help="Earliest window start: ms, ISO-8601, -15m.")
@click.option("--to", default=None, help="Latest window start (as --from).")
@click.option("--prefix", default=None, help="Only keys that start with this one (no KEY).")
@click.option("--key-from", default=None, help="Smallest key (inclusive; no KEY).")
@click.option("--key-to", default=None, help="Largest key (inclusive; no KEY).")
@click.option(
    "--order", type=_ORDER, default="asc", show_default=True, help="desc: newest window first."
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Stop after N windows.")
@click.option("--page-size", type=click.IntRange(min=1), default=None, help="Windows per page.")
@url_option()
@credential_options
def windows(
    table_name: str,
    key: str | None,
    from_: str | None,
    to: str | None,
    prefix: str | None,
    key_from: str | None,
    key_to: str | None,
    order: str,
    limit: int | None,
    page_size: int | None,
    urls: tuple[str, ...],
    token: str | None,
    api_key: str | None,
    ca_file: Path | None,
) -> None:
    """Print the windows of KEY in TABLE (without KEY: of every key, or of --prefix or
    --key-from/--key-to), one JSON line {"key", "start", "end", "value"} each, in key and
    start order."""
    if key is not None and (prefix or key_from or key_to):
        raise click.UsageError("give KEY, or --prefix / --key-from / --key-to, not both")
    if prefix is not None and (key_from is not None or key_to is not None):
        raise click.UsageError("give --prefix or --key-from/--key-to, not both")

    def read(client: Client) -> Iterable[dict[str, Any]]:
        if key is not None:
            found = client.windows(
                table_name, key, from_=from_, to=to, order=order, page_size=page_size
            )
            return ({"key": key, **window} for window in found)
        return client.window_range(
            table_name,
            from_=from_,
            to=to,
            key_from=key_from,
            key_to=key_to,
            prefix=prefix,
            order=order,
            page_size=page_size or 500,
        )

    _print_items(read, urls, limit, token, api_key, ca_file)
