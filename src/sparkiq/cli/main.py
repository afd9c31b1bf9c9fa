"""The `sparkiq` command line: demo, run, serve, table, get, cluster, broker.

Every option that names a place (bootstrap servers, app id, node URL) also reads an
environment variable, shown in `--help`. The options of `serve` (and `--bootstrap-servers`,
`--app` and `--kafka-config` everywhere) are made from the fields of `NodeSettings`
(`sparkiq.cli.options`): name, variable, type, bounds, default and help are the field's.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import orjson

from sparkiq import __version__
from sparkiq.cli.options import field_option, settings_options
from sparkiq.core.errors import SparkiqError
from sparkiq.core.partitioner import Partitioner
from sparkiq.core.tables import Format, TableDef, TableKind
from sparkiq.node.settings import NodeSettings

if TYPE_CHECKING:
    from sparkiq.kafka.security import KafkaSecurity

_FORMATS = click.Choice([f.value for f in Format])
_F = TypeVar("_F", bound=Callable[..., Any])


def _env_option(*names: str, envvar: str, help: str, **kwargs: Any) -> Callable[[_F], _F]:
    """An option that also reads environment variable *envvar* (shown in --help)."""
    option: Callable[[_F], _F] = click.option(
        *names, envvar=envvar, show_envvar=True, help=help, **kwargs
    )
    return option


def _file_option(*names: str, envvar: str, help: str, **kwargs: Any) -> Callable[[_F], _F]:
    """An `_env_option` naming an existing file, given as a Path (None when absent)."""
    kwargs.setdefault("default", None)
    return _env_option(
        *names,
        envvar=envvar,
        type=click.Path(dir_okay=False, exists=True, path_type=Path),
        help=help,
        **kwargs,
    )


def _bootstrap_option() -> Callable[[_F], _F]:
    # Required on the command line: a node or command pointed at a local broker by default
    # would fail far from the cause (code and tests may rely on the model's default).
    return field_option(NodeSettings, "bootstrap_servers", required=True)


def _app_option() -> Callable[[_F], _F]:
    return field_option(NodeSettings, "app")


def _kafka_security_options(command: _F) -> _F:
    """--kafka-config and --kafka-property: SASL/SSL settings of every Kafka client."""
    for option in (
        click.option(
            "--kafka-property",
            "kafka_properties",
            multiple=True,
            metavar="KEY=VALUE",
            help="Kafka client security setting (librdkafka name: security.protocol, sasl.*, "
            "ssl.*), overriding --kafka-config (repeatable). Put passwords in the file: a "
            "command line is visible to every user of the machine.",
        ),
        # The field holds the loaded settings; the option names their file (None: the
        # field's default, PLAINTEXT), merged with --kafka-property by `_kafka_security`.
        field_option(
            NodeSettings,
            "kafka_config",
            click_type=click.Path(dir_okay=False, exists=True, path_type=Path),
            default=None,
        ),
    ):
        command = option(command)
    return command


def _kafka_security(kafka_config: Path | None, kafka_properties: tuple[str, ...]) -> KafkaSecurity:
    """The `KafkaSecurity` of the two options above, checked by librdkafka at once."""
    from sparkiq.kafka.security import KafkaSecurity

    try:
        security = KafkaSecurity.load(kafka_config, kafka_properties)
        security.check()
    except SparkiqError as exc:
        raise click.UsageError(str(exc)) from None
    return security


def _url_option() -> Callable[[_F], _F]:
    return _env_option(
        "--url",
        "urls",
        envvar="SPARKIQ_URL",
        multiple=True,
        default=["http://127.0.0.1:8100"],
        show_default=True,
        help="URL of any serving node (repeatable).",
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sparkiq")
def main() -> None:
    """sparkiq: query the state of PySpark streaming pipelines by key, from any node."""


@main.command()
@click.option("--port", type=int, default=0, help="Port on 127.0.0.1 (default: a free one).")
def broker(port: int) -> None:
    """Run the Kafka-compatible dev broker in the foreground until Ctrl-C."""
    from sparkiq.dev.broker import DevBroker

    with DevBroker(port=port) as b:
        click.echo(f"dev broker on {b.bootstrap_servers} (pid {b.pid}); Ctrl-C stops it")
        click.echo(f"  export SPARKIQ_BOOTSTRAP_SERVERS={b.bootstrap_servers}")
        _wait_for_signal()


# Spellings other than `--field-name` / `--field-name/--no-field-name`, as deployed.
_SERVE_FLAGS = {
    "jwt_public_key_files": "--jwt-public-key-file",  # repeated, one key file each time
    "protect_ops": "--protect-ops/--open-ops",
}


@main.command()
@_bootstrap_option()
@_app_option()
@_kafka_security_options
@settings_options(
    NodeSettings, exclude=("bootstrap_servers", "app", "kafka_config"), flags=_SERVE_FLAGS
)
def serve(**options: Any) -> None:
    """Run a serving node: join the cluster, restore partitions, answer HTTP queries."""
    from pydantic import ValidationError

    from sparkiq.cli.serving import run_node
    from sparkiq.http.settings import raise_open_file_limit

    options["kafka_config"] = _kafka_security(
        options.pop("kafka_config"), options.pop("kafka_properties")
    )
    try:
        settings = NodeSettings(**{k: v for k, v in options.items() if v is not None})
    except ValidationError as exc:
        raise click.UsageError(str(exc)) from exc

    def start() -> None:
        # Connections, Kafka clients and RocksDB files all take descriptors: the node may
        # hold as many as the system lets it (the connection limit's default follows).
        raise_open_file_limit()
        run_node(settings)

    _run(start)


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
@click.option(
    "--partitioner",
    type=click.Choice(["auto", *(p.value for p in Partitioner)]),
    default="auto",
    show_default=True,
    help="How the producers placed keys in partitions: murmur2 (Java clients, Kafka Streams, "
    "Spark, sparkiq), crc32 (librdkafka's default consistent_random: confluent-kafka, "
    "most Python and C producers), fnv1a (librdkafka fnv1a, Go's Sarama), any (custom or "
    "unknown: a lookup asks every partition); auto samples the topic and picks the one "
    "that places every sampled record.",
)
@_bootstrap_option()
@_app_option()
@_kafka_security_options
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
    partitioner: str,
    bootstrap_servers: str,
    app: str,
    kafka_config: Path | None,
    kafka_properties: tuple[str, ...],
) -> None:
    """Register topic TOPIC as table NAME: its latest value per key, null values deleting."""
    from sparkiq.kafka.admin import partition_count
    from sparkiq.kafka.catalog import register_table

    security = _kafka_security(kafka_config, kafka_properties)

    def run() -> None:
        partitions = partition_count(bootstrap_servers, topic, security=security)
        kind_ = TableKind(kind)
        if partitioner == "auto":
            chosen = _detect_partitioner(
                bootstrap_servers, topic, partitions, kind_ is TableKind.WINDOWED, security
            )
        else:
            chosen = Partitioner(partitioner)
        tdef = TableDef(
            name=name,
            topic=topic,
            partitions=partitions,
            key_format=Format(key_format),
            value_format=Format(value_format),
            kind=kind_,
            window_size_ms=window_size_ms,
            key_schema=key_schema.read_text() if key_schema else None,
            value_schema=value_schema.read_text() if value_schema else None,
            description=description,
            partitioner=chosen,
        )
        register_table(bootstrap_servers, tdef, app=app, security=security)
        click.echo(
            f"table {name!r} registered: topic {topic!r}, {tdef.partitions} partitions, "
            f"partitioner {chosen.value}"
        )

    _run(run)


def _detect_partitioner(
    bootstrap: str, topic: str, partitions: int, windowed: bool, security: KafkaSecurity
) -> Partitioner:
    """Sample `topic` and print which partitioner placed its records, and why."""
    from sparkiq.core.placement import detect
    from sparkiq.kafka.sample import sample_keys

    click.echo(f"sampling {topic!r} ({partitions} partitions) to tell its partitioner...")
    samples = sample_keys(bootstrap, topic, partitions, security=security)
    if windowed:  # a windowed key ends with its 8-byte window start; the key alone decides
        samples = [(p, key[:-8]) for p, key in samples if len(key) >= 8]
    found = detect(samples, partitions)
    click.echo(f"partitioner {found.chosen.value}: {found.evidence()}")
    return found.chosen


@table.command("list")
@_bootstrap_option()
@_app_option()
@_kafka_security_options
def table_list(
    bootstrap_servers: str, app: str, kafka_config: Path | None, kafka_properties: tuple[str, ...]
) -> None:
    """List the tables in the catalog."""
    from sparkiq.kafka.catalog import read_catalog

    security = _kafka_security(kafka_config, kafka_properties)

    def run() -> None:
        tables = read_catalog(bootstrap_servers, app=app, security=security)
        if not tables:
            click.echo("no tables registered")
        for t in sorted(tables.values(), key=lambda t: t.name):
            click.echo(
                f"{t.name}\ttopic={t.topic}\tpartitions={t.partitions}\tkind={t.kind.value}"
                f"\tkey={t.key_format.value}\tvalue={t.value_format.value}"
                f"\tpartitioner={t.partitioner.value}"
            )

    _run(run)


@table.command("drop")
@click.argument("name")
@_bootstrap_option()
@_app_option()
@_kafka_security_options
def table_drop(
    name: str,
    bootstrap_servers: str,
    app: str,
    kafka_config: Path | None,
    kafka_properties: tuple[str, ...],
) -> None:
    """Remove table NAME from the catalog (its topic is left as it is)."""
    from sparkiq.kafka.catalog import drop_table

    security = _kafka_security(kafka_config, kafka_properties)
    _run(lambda: drop_table(bootstrap_servers, name, app=app, security=security))
    click.echo(f"table {name!r} dropped from the catalog")


def _credential_options(command: _F) -> _F:
    """--token, --api-key and --ca-file: how a client command reaches secured nodes."""
    for option in (
        _file_option(
            "--ca-file",
            envvar="SPARKIQ_CA_FILE",
            help="CA certificate(s) to check https:// nodes against [default: the system's].",
        ),
        _env_option("--api-key", envvar="SPARKIQ_API_KEY", default=None, help="API key to send."),
        _env_option(
            "--token", envvar="SPARKIQ_TOKEN", default=None, help="Bearer token (JWT) to send."
        ),
    ):
        command = option(command)
    return command


@main.command()
@click.argument("table_name", metavar="TABLE")
@click.argument("key")
@_url_option()
@click.option("--max-lag", type=int, default=None, help="Let a standby this close answer.")
@_credential_options
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
            list(urls), max_lag=max_lag, token=token, api_key=api_key, ca_file=ca_file
        ) as client:
            entry = client.get_entry(table_name, key)
        if entry is None:
            click.echo(f"key {key!r} not found in table {table_name!r}", err=True)
            sys.exit(1)
        click.echo(orjson.dumps(entry, option=orjson.OPT_INDENT_2).decode())

    _run(run)


@main.command()
@_url_option()
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
@_credential_options
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
    from sparkiq.http.tls import client_context

    def run() -> None:
        verify = client_context(ca_file) if ca_file is not None else True
        headers = credential_headers(token, api_key)
        with httpx.Client(headers=headers, verify=verify) as http:
            if watch_s is None:
                click.echo(render_cluster(list(urls), as_json=as_json, http=http))
            else:
                watch_cluster(list(urls), interval_s=watch_s, as_json=as_json, http=http)

    _run(run)


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
def demo(
    nodes: int, duration: float | None, base_dir: Path | None, rate: float, backlog: int
) -> None:
    """Run the demo: dev broker, invoice generator, Spark pipeline, serving nodes."""
    from sparkiq.dev.demo import run_demo

    _run(
        lambda: run_demo(
            nodes=nodes, duration_s=duration, base_dir=base_dir, rate_per_s=rate, backlog=backlog
        )
    )


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
@_bootstrap_option()
@_app_option()
@_kafka_security_options
@_env_option(
    "--master",
    envvar="SPARKIQ_SPARK_MASTER",
    default="local[*]",
    show_default=True,
    help="Spark master: local[N] or a cluster URL such as spark://host:7077.",
)
@_env_option(
    "--checkpoint-dir",
    envvar="SPARKIQ_CHECKPOINT_DIR",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Root of the queries' checkpoints; a restart resumes from here.",
)
@click.option(
    "--trigger",
    default="1 second",
    show_default=True,
    help="Micro-batch interval of every query ('0 seconds': back to back).",
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

    from sparkiq.spark.runner import RunSettings, run_pipeline

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    trigger = options.pop("trigger")
    settings = RunSettings(
        trigger_interval=None if trigger.strip() in ("", "0", "0 seconds") else trigger,
        progress_interval_s=options.pop("progress_interval"),
        duration_s=options.pop("duration"),
        kafka_security=_kafka_security(
            options.pop("kafka_config"), options.pop("kafka_properties")
        ),
        **options,
    )
    _run(lambda: run_pipeline(pipeline_file, settings))


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
