"""The `sparkiq` command line: demo, run, serve, table, get, range, windows, watch, changes,
cluster, broker, install.

Every option that names a place (bootstrap servers, app id, node URL) also reads an
environment variable, shown in `--help`. The options of `serve` (and `--bootstrap-servers`,
`--app` and `--kafka-config` everywhere) are made from the fields of `NodeSettings`
(`sparkiq.cli.options`): name, variable, type, bounds, default and help are the field's.
The options the commands share are in `sparkiq.cli.common`; `table` is in `sparkiq.cli.table`,
`range` and `windows` in `sparkiq.cli.reads`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson

from sparkiq import __version__
from sparkiq.cli.common import (
    app_option,
    bootstrap_option,
    credential_options,
    env_option,
    kafka_security,
    kafka_security_options,
    reach_brokers,
    run_command,
    url_option,
    wait_for_signal,
)
from sparkiq.cli.options import settings_error, settings_options
from sparkiq.cli.reads import range_command, windows
from sparkiq.cli.table import table
from sparkiq.node.settings import NodeSettings

if TYPE_CHECKING:
    from sparkiq.client import Client


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sparkiq")
def main() -> None:
    """sparkiq: query the state of PySpark streaming pipelines by key, from any node."""


main.add_command(table)
main.add_command(range_command)
main.add_command(windows)


@main.command()
@click.option(
    "--kind",
    type=click.Choice(["kafka", "dev"]),
    default="kafka",
    show_default=True,
    help="Apache Kafka (KRaft), or the memory-only dev broker (needs no Java).",
)
@click.option(
    "--brokers",
    type=click.Choice(["1", "3"]),
    default="1",
    show_default=True,
    help="Apache Kafka nodes; with 3, topics get 3 replicas and min.insync.replicas=2.",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep Apache Kafka's data (and ports) here for a later start (default: a "
    "temporary directory, removed at the end).",
)
@click.option(
    "--port", type=int, default=0, help="The dev broker's port on 127.0.0.1 (default: free)."
)
def broker(kind: str, brokers: str, data_dir: Path | None, port: int) -> None:
    """Run a Kafka broker on 127.0.0.1 in the foreground until Ctrl-C.

    Apache Kafka's jars come from Maven Central the first time (`sparkiq install kafka`).
    """
    from sparkiq.dev.broker import make_broker
    from sparkiq.dev.processes import sigterm_as_interrupt

    def run() -> None:
        # SIGTERM while the broker starts stops it as Ctrl-C does (its processes run in
        # sessions of their own: nothing else would stop them).
        with (
            sigterm_as_interrupt(),
            make_broker(
                kind,
                brokers=int(brokers),
                data_dir=data_dir,
                port=port,
                progress=lambda line: click.echo(f"sparkiq: {line}", err=True),
            ) as b,
        ):
            click.echo(f"{b.describe()}; Ctrl-C stops it")
            click.echo(f"  export SPARKIQ_BOOTSTRAP_SERVERS={b.bootstrap_servers}")
            wait_for_signal()

    run_command(run)


@main.command()
@click.argument(
    "what", type=click.Choice(["kafka", "kafka-streams", "spark-kafka"]), default="kafka"
)
def install(what: str) -> None:
    """Install Java libraries sparkiq runs, once, from Maven Central with mvn (or PySpark's
    Ivy where mvn is missing): `kafka` is Apache Kafka's jars; `kafka-streams` is Kafka
    Streams' (the tests run a Kafka Streams application); `spark-kafka` is Spark's Kafka
    connector at the installed PySpark's version, which sparkiq's Spark sessions then put
    on their class path (`--kafka-connector auto` takes it)."""
    from sparkiq.dev.jars import install_jars, jar_set_named

    def run() -> None:
        jar_set = jar_set_named(what)
        said: list[str] = []

        def progress(line: str) -> None:
            said.append(line)
            click.echo(f"sparkiq: {line}")

        jars = install_jars(jar_set, progress=progress)
        if not said:  # installed before: say where
            click.echo(f"sparkiq: {jar_set.title}: {len(jars)} jars in {jars[0].parent}")

    run_command(run)


# Spellings other than `--field-name` / `--field-name/--no-field-name`, as deployed.
_SERVE_FLAGS = {
    "jwt_public_key_files": "--jwt-public-key-file",  # repeated, one key file each time
    "protect_ops": "--protect-ops/--open-ops",
}


@main.command()
@bootstrap_option()
@app_option()
@kafka_security_options
@settings_options(
    NodeSettings, exclude=("bootstrap_servers", "app", "kafka_config"), flags=_SERVE_FLAGS
)
def serve(**options: Any) -> None:
    """Run a serving node: join the cluster, restore partitions, answer HTTP queries."""
    from pydantic import ValidationError

    from sparkiq.cli.serving import run_node
    from sparkiq.core.openfiles import raise_open_file_limit

    options["kafka_config"] = kafka_security(
        options.pop("kafka_config"), options.pop("kafka_properties")
    )
    try:
        settings = NodeSettings(**{k: v for k, v in options.items() if v is not None})
    except ValidationError as exc:
        raise click.UsageError(settings_error(exc, _SERVE_FLAGS)) from None

    def start() -> None:
        # Connections, Kafka clients and RocksDB files all take descriptors: the node may
        # hold as many as the system lets it (the connection limit's default follows).
        raise_open_file_limit()
        run_node(settings)

    run_command(start)


@main.command()
@click.argument("table_name", metavar="TABLE")
@click.argument("key")
@url_option()
@click.option(
    "--max-lag",
    type=click.IntRange(min=0),
    default=None,
    help="Let a standby this many offsets behind (or closer) answer.",
)
@credential_options
def get(
    table_name: str,
    key: str,
    urls: tuple[str, ...],
    max_lag: int | None,
    token: str | None,
    api_key: str | None,
    ca_file: Path | None,
) -> None:
    """Print the value of KEY in TABLE as JSON (exit 1 when absent)."""
    from sparkiq.client import Client

    def run() -> None:
        with Client(
            list(urls),
            max_lag=max_lag,
            token=token,
            api_key=api_key,
            ca_file=ca_file,
            wait_for_unreachable=False,
        ) as client:
            entry = client.get_entry(table_name, key)
        if entry is None:
            click.echo(f"key {key!r} not found in table {table_name!r}", err=True)
            sys.exit(1)
        click.echo(orjson.dumps(entry, option=orjson.OPT_INDENT_2).decode())

    run_command(run)


@main.command()
@click.argument("table_name", metavar="TABLE")
@click.argument("key")
@url_option()
@click.option("--count", type=click.IntRange(min=1), default=None, help="Stop after N events.")
@credential_options
def watch(
    table_name: str,
    key: str,
    urls: tuple[str, ...],
    count: int | None,
    token: str | None,
    api_key: str | None,
    ca_file: Path | None,
) -> None:
    """Print KEY's answer in TABLE now, then again at each change, one JSON line each, until
    Ctrl-C (or --count events)."""
    _print_stream(
        lambda client: client.watch(table_name, key), urls, count, token, api_key, ca_file
    )


@main.command()
@click.argument("table_name", metavar="TABLE")
@click.option("--prefix", default=None, help="Only keys that start with this one.")
@click.option("--from", "from_", default=None, help="Smallest key (inclusive).")
@click.option("--to", default=None, help="Largest key (inclusive).")
@url_option()
@click.option("--count", type=click.IntRange(min=1), default=None, help="Stop after N changes.")
@credential_options
def changes(
    table_name: str,
    prefix: str | None,
    from_: str | None,
    to: str | None,
    urls: tuple[str, ...],
    count: int | None,
    token: str | None,
    api_key: str | None,
    ca_file: Path | None,
) -> None:
    """Print every change of a key of TABLE in the range (--prefix, or --from/--to; neither:
    the whole table) from now on, one JSON line each, until Ctrl-C (or --count changes)."""
    if prefix is not None and (from_ is not None or to is not None):
        raise click.UsageError("give --prefix or --from/--to, not both")
    _print_stream(
        lambda client: client.changes(table_name, prefix=prefix, from_=from_, to=to),
        urls,
        count,
        token,
        api_key,
        ca_file,
    )


def _print_stream(
    stream: Callable[[Client], Iterable[dict[str, Any]]],
    urls: tuple[str, ...],
    count: int | None,
    token: str | None,
    api_key: str | None,
    ca_file: Path | None,
) -> None:
    """Print each entry of a client's `stream` as a JSON line, until Ctrl-C or `count`."""
    from sparkiq.client import Client

    def run() -> None:
        with Client(
            list(urls), token=token, api_key=api_key, ca_file=ca_file, wait_for_unreachable=False
        ) as client:
            for n, entry in enumerate(stream(client), 1):
                click.echo(orjson.dumps(entry).decode())
                if count is not None and n >= count:
                    return

    run_command(run)


@main.command()
@url_option()
@click.option("--json", "as_json", is_flag=True, help="Print the raw metadata.")
@click.option(
    "--watch",
    "watch_s",
    type=click.FloatRange(min=0.2),
    default=None,
    is_flag=False,
    flag_value=2.0,
    help="Show it again every N seconds (default 2) until Ctrl-C.",
)
@credential_options
def cluster(
    urls: tuple[str, ...],
    as_json: bool,
    watch_s: float | None,
    token: str | None,
    api_key: str | None,
    ca_file: Path | None,
) -> None:
    """Show which node holds which partitions and how far behind each replica is."""
    import httpx

    from sparkiq.cli.clusterview import render_cluster, watch_cluster
    from sparkiq.client import credential_headers
    from sparkiq.client.client import checked_node_url
    from sparkiq.http.tls import client_context

    def run() -> None:
        for url in urls:
            checked_node_url(url)
        verify = client_context(ca_file) if ca_file is not None else True
        headers = credential_headers(token, api_key)
        with httpx.Client(headers=headers, verify=verify) as http:
            if watch_s is None:
                click.echo(render_cluster(list(urls), as_json=as_json, http=http))
            else:
                watch_cluster(list(urls), interval_s=watch_s, as_json=as_json, http=http)

    run_command(run)


@main.command()
@click.option(
    "--nodes",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Serving nodes to start.",
)
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
@click.option(
    "--rate",
    type=click.FloatRange(min=0.1),
    default=50.0,
    show_default=True,
    help="Invoices per second after the first batch.",
)
@click.option(
    "--backlog",
    type=click.IntRange(min=1),
    default=2_000,
    show_default=True,
    help="Invoices written before the pipeline starts.",
)
@click.option(
    "--broker",
    "broker_kind",
    type=click.Choice(["kafka", "dev"]),
    default="kafka",
    show_default=True,
    help="Apache Kafka (KRaft, one node), or the memory-only dev broker.",
)
def demo(
    nodes: int,
    duration: float | None,
    base_dir: Path | None,
    rate: float,
    backlog: int,
    broker_kind: str,
) -> None:
    """Run the demo: a Kafka broker, invoice generator, Spark pipeline, serving nodes."""
    from sparkiq.dev.demo import run_demo

    run_command(
        lambda: run_demo(
            nodes=nodes,
            duration_s=duration,
            base_dir=base_dir,
            rate_per_s=rate,
            backlog=backlog,
            broker=broker_kind,
        )
    )


KAFKA_CONNECTORS = ("auto", "builtin", "python")


def _key_value(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE")
        out[name] = value
    return out


@main.command()
@click.argument("pipeline_file", type=click.Path(dir_okay=False, path_type=Path))
@bootstrap_option()
@app_option()
@kafka_security_options
@env_option(
    "--master",
    envvar="SPARKIQ_SPARK_MASTER",
    default=None,
    help="Spark master: local[N] or a cluster URL such as spark://host:7077 (default: "
    "spark-submit's --master when run under spark-submit, else local[2 x cores]: two "
    "task slots per core, so one query's tasks do not wait for another's).",
)
@env_option(
    "--checkpoint-dir",
    envvar="SPARKIQ_CHECKPOINT_DIR",
    required=True,
    callback=lambda _ctx, _param, text: text if "://" in text else Path(text),
    help="Root of the queries' checkpoints; a restart resumes from here. A directory, or "
    "on a cluster a URL of storage every node reaches (hdfs://..., s3a://...).",
)
@click.option(
    "--trigger",
    default="1 second",
    show_default=True,
    help="realtime: every query that can (stateless, Spark's Kafka connector) runs in "
    "Spark's Real-Time Mode, the others in micro-batches, each saying why at start; "
    "microbatch: micro-batches every second; or the micro-batch interval of every query "
    "('0 seconds': back to back).",
)
@click.option(
    "--max-offsets-per-trigger",
    type=click.IntRange(min=1),
    default=None,
    help="Cap on records read per micro-batch (default: all available).",
)
@click.option(
    "--shuffle-partitions",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="spark.sql.shuffle.partitions: tasks (and state store partitions) per micro-batch "
    "of each stateful operator. Each costs a round trip to a Python worker and a state "
    "commit per batch, so 1 keeps batches short on a small machine; raise it for more "
    "parallel work per batch. A query keeps the count its checkpoint started with.",
)
@env_option(
    "--kafka-connector",
    envvar="SPARKIQ_KAFKA_CONNECTOR",
    # sparkiq.spark.connector.KafkaConnector's values (that module loads PySpark; the CLI
    # does not until a command needs it; tests/unit/cli checks the two agree).
    type=click.Choice(KAFKA_CONNECTORS),
    default="auto",
    show_default=True,
    help="Kafka source and sink: Spark's built-in connector (builtin: spark-sql-kafka-0-10, "
    "reads without Python workers), sparkiq's Python one (python), or the built-in one when "
    "its classes are on the classpath (auto). Same columns either way.",
)
@click.option(
    "--packages",
    multiple=True,
    help="Maven coordinates of a JVM package for Spark (spark.jars.packages, as "
    "spark-submit --packages), e.g. Spark's Kafka connector; repeatable or comma-separated.",
)
@click.option(
    "--param",
    "params",
    multiple=True,
    callback=_key_value,
    help="NAME=VALUE handed to the pipeline as ctx.params (repeatable).",
)
@click.option(
    "--conf",
    "spark_conf",
    multiple=True,
    callback=_key_value,
    help="Spark setting NAME=VALUE (repeatable).",
)
@click.option(
    "--status-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write every query's progress as JSON here.",
)
@click.option(
    "--progress-interval",
    type=click.FloatRange(min=0.5),
    default=5.0,
    show_default=True,
    help="Seconds between progress lines.",
)
@click.option(
    "--duration",
    type=click.FloatRange(min=0),
    default=None,
    help="Stop after this many seconds (default: until Ctrl-C).",
)
def run(pipeline_file: Path, **options: Any) -> None:
    """Run the PySpark pipeline PIPELINE_FILE (it defines pipeline(ctx))."""
    import logging

    from sparkiq.core.errors import ConfigError
    from sparkiq.spark.connector import KafkaConnector
    from sparkiq.spark.realtime import parse_trigger
    from sparkiq.spark.runner import RunSettings, run_pipeline

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        trigger_mode, trigger_interval = parse_trigger(options.pop("trigger"))
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--trigger") from exc
    packages = tuple(p.strip() for each in options.pop("packages") for p in each.split(","))
    settings = RunSettings(
        kafka_connector=KafkaConnector(options.pop("kafka_connector")),
        packages=tuple(p for p in packages if p),
        trigger_mode=trigger_mode,
        trigger_interval=trigger_interval,
        progress_interval_s=options.pop("progress_interval"),
        duration_s=options.pop("duration"),
        kafka_security=kafka_security(options.pop("kafka_config"), options.pop("kafka_properties")),
        **options,
    )

    def start() -> None:
        reach_brokers(settings.bootstrap_servers)
        run_pipeline(pipeline_file, settings)

    run_command(start)
