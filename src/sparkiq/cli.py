"""The `sparkiq` command line: demo, serve, table, get, cluster, broker.

Every option that names a place (bootstrap servers, app id, node URL) also reads an
environment variable, shown in `--help`.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson

from sparkiq import __version__
from sparkiq.errors import SparkiqError
from sparkiq.settings import DEFAULT_APP
from sparkiq.tables import Format, TableDef, TableKind

_FORMATS = click.Choice([f.value for f in Format])
_F = TypeVar("_F", bound=Callable[..., Any])


def _bootstrap_option() -> Callable[[_F], _F]:
    option: Callable[[_F], _F] = click.option(
        "--bootstrap-servers",
        envvar="SPARKIQ_BOOTSTRAP_SERVERS",
        show_envvar=True,
        required=True,
        help="Kafka bootstrap servers, host:port[,host:port].",
    )
    return option


def _app_option() -> Callable[[_F], _F]:
    option: Callable[[_F], _F] = click.option(
        "--app",
        envvar="SPARKIQ_APP",
        show_envvar=True,
        default=DEFAULT_APP,
        show_default=True,
        help="Application id (consumer group '<app>.serving', catalog topic '<app>.catalog').",
    )
    return option


def _url_option() -> Callable[[_F], _F]:
    option: Callable[[_F], _F] = click.option(
        "--url",
        "urls",
        envvar="SPARKIQ_URL",
        show_envvar=True,
        multiple=True,
        default=["http://127.0.0.1:8100"],
        show_default=True,
        help="URL of any serving node (repeatable).",
    )
    return option


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sparkiq")
def main() -> None:
    """sparkiq: query the state of PySpark streaming pipelines by key, from any node."""


@main.command()
@click.option("--port", type=int, default=0, help="Port on 127.0.0.1 (default: a free one).")
def broker(port: int) -> None:
    """Run the Kafka-compatible dev broker in the foreground until Ctrl-C."""
    from sparkiq.broker import DevBroker

    with DevBroker(port=port) as b:
        click.echo(f"dev broker on {b.bootstrap_servers} (pid {b.pid}); Ctrl-C stops it")
        click.echo(f"  export SPARKIQ_BOOTSTRAP_SERVERS={b.bootstrap_servers}")
        _wait_for_signal()


@main.command()
@_bootstrap_option()
@_app_option()
@click.option(
    "--listen",
    envvar="SPARKIQ_LISTEN",
    show_envvar=True,
    default="127.0.0.1:8100",
    show_default=True,
    help="host:port the HTTP API binds to.",
)
@click.option(
    "--advertised-url",
    envvar="SPARKIQ_ADVERTISED_URL",
    show_envvar=True,
    default=None,
    help="URL other nodes use to reach this one (default http://LISTEN).",
)
@click.option(
    "--state-dir",
    envvar="SPARKIQ_STATE_DIR",
    show_envvar=True,
    default="state",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory of this node's RocksDB stores (reused across restarts).",
)
@click.option(
    "--standby-replicas",
    envvar="SPARKIQ_STANDBY_REPLICAS",
    show_envvar=True,
    type=int,
    default=1,
    show_default=True,
    help="Standby copies per partition.",
)
@click.option(
    "--acceptable-lag",
    envvar="SPARKIQ_ACCEPTABLE_LAG",
    show_envvar=True,
    type=int,
    default=10_000,
    show_default=True,
    help="Most offsets behind at which a node may take over a partition.",
)
@click.option(
    "--session-timeout-ms",
    envvar="SPARKIQ_SESSION_TIMEOUT_MS",
    show_envvar=True,
    type=int,
    default=6_000,
    show_default=True,
    help="Group session timeout (failure detection).",
)
@click.option(
    "--request-budget-s",
    envvar="SPARKIQ_REQUEST_BUDGET_S",
    show_envvar=True,
    type=float,
    default=5.0,
    show_default=True,
    help="How long a request waits for a restoring partition before 503.",
)
@click.option(
    "--log-level", envvar="SPARKIQ_LOG_LEVEL", show_envvar=True, default="INFO", show_default=True
)
def serve(**options: Any) -> None:
    """Run a serving node: join the cluster, restore partitions, answer HTTP queries."""
    from pydantic import ValidationError

    from sparkiq.serving import run_node
    from sparkiq.settings import NodeSettings

    try:
        settings = NodeSettings(**{k: v for k, v in options.items() if v is not None})
    except ValidationError as exc:
        raise click.UsageError(str(exc)) from exc
    _run(lambda: run_node(settings))


@main.group()
def table() -> None:
    """Register, list and drop queryable tables in the catalog."""


@table.command("create")
@click.argument("name")
@click.option("--topic", required=True, help="Existing keyed topic holding the table's changelog.")
@click.option("--key-format", type=_FORMATS, default="string", show_default=True)
@click.option("--value-format", type=_FORMATS, default="json", show_default=True)
@click.option(
    "--kind", type=click.Choice([k.value for k in TableKind]), default="kv", show_default=True
)
@click.option("--window-size-ms", type=int, default=None, help="Windowed tables: window length.")
@click.option(
    "--key-schema",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Avro keys: file with the writer schema (JSON).",
)
@click.option(
    "--value-schema",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Avro values: file with the writer schema (JSON).",
)
@click.option("--description", default="", help="Free text shown in GET /v1/tables.")
@_bootstrap_option()
@_app_option()
def table_create(
    name: str,
    topic: str,
    key_format: str,
    value_format: str,
    kind: str,
    window_size_ms: int | None,
    key_schema: Path | None,
    value_schema: Path | None,
    description: str,
    bootstrap_servers: str,
    app: str,
) -> None:
    """Register topic TOPIC as table NAME: its latest value per key, null values deleting."""
    from sparkiq.catalog import register_table
    from sparkiq.kafka.admin import partition_count

    def run() -> None:
        tdef = TableDef(
            name=name,
            topic=topic,
            partitions=partition_count(bootstrap_servers, topic),
            key_format=Format(key_format),
            value_format=Format(value_format),
            kind=TableKind(kind),
            window_size_ms=window_size_ms,
            key_schema=key_schema.read_text() if key_schema else None,
            value_schema=value_schema.read_text() if value_schema else None,
            description=description,
        )
        register_table(bootstrap_servers, tdef, app=app)
        click.echo(f"table {name!r} registered: topic {topic!r}, {tdef.partitions} partitions")

    _run(run)


@table.command("list")
@_bootstrap_option()
@_app_option()
def table_list(bootstrap_servers: str, app: str) -> None:
    """List the tables in the catalog."""
    from sparkiq.catalog import read_catalog

    def run() -> None:
        tables = read_catalog(bootstrap_servers, app=app)
        if not tables:
            click.echo("no tables registered")
        for t in sorted(tables.values(), key=lambda t: t.name):
            click.echo(
                f"{t.name}\ttopic={t.topic}\tpartitions={t.partitions}\tkind={t.kind.value}"
                f"\tkey={t.key_format.value}\tvalue={t.value_format.value}"
            )

    _run(run)


@table.command("drop")
@click.argument("name")
@_bootstrap_option()
@_app_option()
def table_drop(name: str, bootstrap_servers: str, app: str) -> None:
    """Remove table NAME from the catalog (its topic is left as it is)."""
    from sparkiq.catalog import drop_table

    _run(lambda: drop_table(bootstrap_servers, name, app=app))
    click.echo(f"table {name!r} dropped from the catalog")


@main.command()
@click.argument("table_name", metavar="TABLE")
@click.argument("key")
@_url_option()
@click.option("--max-lag", type=int, default=None, help="Let a standby this close answer.")
def get(table_name: str, key: str, urls: tuple[str, ...], max_lag: int | None) -> None:
    """Print the value of KEY in TABLE as JSON (exit 1 when absent)."""
    from sparkiq.client import Client

    def run() -> None:
        with Client(list(urls), max_lag=max_lag) as client:
            entry = client.get_entry(table_name, key)
        if entry is None:
            click.echo(f"key {key!r} not found in table {table_name!r}", err=True)
            sys.exit(1)
        click.echo(orjson.dumps(entry, option=orjson.OPT_INDENT_2).decode())

    _run(run)


@main.command()
@_url_option()
@click.option("--json", "as_json", is_flag=True, help="Print the raw metadata.")
def cluster(urls: tuple[str, ...], as_json: bool) -> None:
    """Show which node holds which partitions and how far behind each replica is."""
    from sparkiq.clusterview import render_cluster

    _run(lambda: click.echo(render_cluster(list(urls), as_json=as_json)))


@main.command()
@click.option("--nodes", type=int, default=3, show_default=True, help="Serving nodes to start.")
@click.option(
    "--duration",
    type=float,
    default=None,
    help="Stop after this many seconds (default: run until Ctrl-C).",
)
@click.option(
    "--base-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where node state and logs go (default: a temporary directory).",
)
def demo(nodes: int, duration: float | None, base_dir: Path | None) -> None:
    """Run the demo: dev broker, sample data, serving nodes; print queries that work."""
    from sparkiq.demo import run_demo

    _run(lambda: run_demo(nodes=nodes, duration_s=duration, base_dir=base_dir))


def _run(fn: Any) -> None:
    try:
        fn()
    except SparkiqError as exc:
        click.echo(f"sparkiq: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


def _wait_for_signal() -> None:
    stop = False

    def handler(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, handler)
    try:
        while not stop:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
