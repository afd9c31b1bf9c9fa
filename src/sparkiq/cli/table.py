"""`sparkiq table`: register, list and drop the queryable tables of an app's catalog.

`table create` counts the topic's partitions and samples the topic: its records must decode
in the formats given (`sparkiq.core.formatcheck`; `--force` registers anyway) and, unless
told (`--partitioner`), the sample tells which partitioner placed them. An existing name is
refused unless `--replace`; dropping a name the catalog lacks is an error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sparkiq.cli.common import (
    app_option,
    bootstrap_option,
    kafka_security,
    kafka_security_options,
    reach_brokers,
    run_command,
)
from sparkiq.core.errors import CatalogError, UnknownTableError
from sparkiq.core.kstreams import SERDE_NAMES, StoreType
from sparkiq.core.kstreams import changelog_topic as changelog_topic_of
from sparkiq.core.partitioner import Partitioner
from sparkiq.core.tables import Format, TableDef, TableKind, WindowLayout

if TYPE_CHECKING:
    from sparkiq.core.formatcheck import SampledRecord
    from sparkiq.kafka.security import KafkaSecurity

_FORMATS = click.Choice([f.value for f in Format])


@click.group()
def table() -> None:
    """Register, list and drop queryable tables in the catalog."""


@table.command("create")
@click.argument("name")
@click.option("--topic", default=None, help="Existing keyed topic holding the table's changelog.")
@click.option(
    "--from-kafka-streams",
    "kafka_streams_app",
    metavar="APP_ID",
    default=None,
    help="Instead of --topic: serve a store of the Kafka Streams application APP_ID (its "
    "application.id) from its changelog, APP_ID-STORE-changelog; give --store, --store-type "
    "and the serdes.",
)
@click.option("--store", default=None, help="--from-kafka-streams: the store's name.")
@click.option(
    "--store-type",
    type=click.Choice([t.value for t in StoreType]),
    default="timestamped-kv",
    show_default=True,
    help="--from-kafka-streams: the store's type (a KTable's and aggregate's store is "
    "timestamped-kv, a windowed aggregate's timestamped-window, a session aggregate's session).",
)
@click.option(
    "--key-serde",
    type=click.Choice(SERDE_NAMES, case_sensitive=False),
    default="string",
    show_default=True,
    help="--from-kafka-streams: the store's key serde (those sparkiq cannot serve yet are "
    "refused by name).",
)
@click.option(
    "--value-serde",
    type=click.Choice(SERDE_NAMES, case_sensitive=False),
    default="json",
    show_default=True,
    help="--from-kafka-streams: the store's value serde; avro is Confluent's (Schema Registry "
    "framed), read with --value-schema.",
)
@click.option("--key-format", type=_FORMATS, default="string", show_default=True)
@click.option("--value-format", type=_FORMATS, default="json", show_default=True)
@click.option(
    "--kind", type=click.Choice([k.value for k in TableKind]), default="kv", show_default=True
)
@click.option("--window-size-ms", type=int, default=None, help="Windowed tables: window length.")
@click.option(
    "--retention",
    default=None,
    help="Windowed tables: how long a window is kept after it ends (e.g. 1h, 90m, '2 days'), "
    "against the newest window end of its partition; older windows are removed from the "
    "stores. Default: kept for good.",
)
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
@click.option(
    "--replace",
    is_flag=True,
    help="Replace a table of the same name (without it, an existing name is refused); "
    "what changed is printed.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Register even when sampled keys or values do not decode in the given formats.",
)
@bootstrap_option()
@app_option()
@kafka_security_options
def table_create(
    name: str,
    topic: str | None,
    kafka_streams_app: str | None,
    store: str | None,
    store_type: str,
    key_serde: str,
    value_serde: str,
    key_format: str,
    value_format: str,
    kind: str,
    window_size_ms: int | None,
    retention: str | None,
    key_schema: Path | None,
    value_schema: Path | None,
    description: str,
    partitioner: str,
    replace: bool,
    force: bool,
    bootstrap_servers: str,
    app: str,
    kafka_config: Path | None,
    kafka_properties: tuple[str, ...],
) -> None:
    """Register topic TOPIC as table NAME: its latest value per key, null values deleting.

    The topic is sampled first: the records must decode in the key and value formats given
    (else nothing is registered, unless --force), and with --partitioner auto the sample
    tells which partitioner placed them.

    With --from-kafka-streams, the table is a Kafka Streams application's store, read from its
    changelog; windows and sessions keep the changelog's retention.ms.
    """
    from sparkiq.core.durations import parse_duration_ms
    from sparkiq.kafka.access import check_rights
    from sparkiq.kafka.admin import partition_count
    from sparkiq.kafka.catalog import read_catalog, register_table
    from sparkiq.kafka.roles import table_create_needs
    from sparkiq.kafka.sample import sample_records

    security = kafka_security(kafka_config, kafka_properties)

    def run() -> None:
        retention_ms = parse_duration_ms(retention) if retention is not None else None
        if (topic is None) == (kafka_streams_app is None):
            raise CatalogError("give the changelog: --topic TOPIC or --from-kafka-streams APP_ID")
        changelog = topic or _kafka_streams_changelog(kafka_streams_app, store)
        reach_brokers(bootstrap_servers)
        check_rights(
            bootstrap_servers,
            table_create_needs(app, changelog),
            doing=f"register table {name!r}",
            security=security,
        )
        partitions = partition_count(bootstrap_servers, changelog, security=security)
        existing = read_catalog(bootstrap_servers, app=app, security=security).get(name)
        if existing is not None and not replace:
            raise CatalogError(
                f"table {name!r} exists ({_summary(existing)}); write --replace to replace "
                "it, or choose another name"
            )
        if kafka_streams_app is not None:
            tdef = _kafka_streams_table(
                name,
                kafka_streams_app,
                store or "",
                StoreType(store_type),
                partitions,
                key_serde,
                value_serde,
                window_size_ms,
                retention_ms,
                value_schema,
                description,
                bootstrap_servers,
                security,
            )
        else:
            tdef = TableDef(
                name=name,
                topic=changelog,
                partitions=partitions,
                key_format=Format(key_format),
                value_format=Format(value_format),
                kind=TableKind(kind),
                window_size_ms=window_size_ms,
                retention_ms=retention_ms,
                key_schema=key_schema.read_text() if key_schema else None,
                value_schema=value_schema.read_text() if value_schema else None,
                description=description,
            )
        click.echo(f"sampling {changelog!r} ({partitions} partitions)...")
        records = sample_records(bootstrap_servers, changelog, partitions, security=security)
        _check_formats(tdef, records, force)
        if partitioner == "auto":
            chosen = _detect_partitioner(records, tdef)
        else:
            chosen = Partitioner(partitioner)
        tdef = dataclasses.replace(tdef, partitioner=chosen)
        register_table(bootstrap_servers, tdef, app=app, security=security)
        if existing is None:
            click.echo(
                f"table {name!r} registered: topic {changelog!r}, {tdef.partitions} partitions, "
                f"partitioner {chosen.value}"
            )
        else:
            changed = _changes(existing, tdef)
            click.echo(
                f"table {name!r} replaced: "
                + ("; ".join(changed) if changed else "the same definition as before")
            )
        if retention_ms is not None and kafka_streams_app is None:
            _check_topic_retention(bootstrap_servers, changelog, retention_ms, security)

    run_command(run)


def _kafka_streams_changelog(app_id: str | None, store: str | None) -> str:
    if not store:
        raise CatalogError("--from-kafka-streams needs the store's name: --store STORE")
    assert app_id is not None
    return changelog_topic_of(app_id, store)


def _kafka_streams_table(
    name: str,
    app_id: str,
    store: str,
    store_type: StoreType,
    partitions: int,
    key_serde: str,
    value_serde: str,
    window_size_ms: int | None,
    retention_ms: int | None,
    value_schema: Path | None,
    description: str,
    bootstrap: str,
    security: KafkaSecurity,
) -> TableDef:
    """The table of a Kafka Streams store; windows and sessions are kept as long as the
    changelog keeps them (its retention.ms) unless --retention says otherwise."""
    from sparkiq.core.kstreams import kstreams_table
    from sparkiq.kafka.admin import topic_config

    if store_type.window_layout is not None and retention_ms is None:
        config = topic_config(bootstrap, changelog_topic_of(app_id, store), security=security)
        kept = int(config.get("retention.ms", "-1"))
        retention_ms = kept if kept > 0 else None
        click.echo(
            f"retention: {'kept for good' if retention_ms is None else f'{kept} ms'}, as the "
            "changelog's retention.ms"
        )
    return kstreams_table(
        name,
        application_id=app_id,
        store=store,
        store_type=store_type,
        partitions=partitions,
        key_serde=key_serde,
        value_serde=value_serde,
        window_size_ms=window_size_ms,
        retention_ms=retention_ms,
        value_schema=value_schema.read_text() if value_schema else None,
        description=description,
    )


def _summary(table: TableDef) -> str:
    return (
        f"topic {table.topic!r}, key {table.key_format.value}, value "
        f"{table.value_format.value}, kind {table.kind.value}"
    )


def _changes(old: TableDef, new: TableDef) -> list[str]:
    """`field old -> new` for each field of the definition that differs."""
    said = []
    for f in dataclasses.fields(TableDef):
        before, after = getattr(old, f.name), getattr(new, f.name)
        if before == after:
            continue
        if f.name.endswith("_schema"):  # whole schemas do not fit on a line
            said.append(f"{f.name} changed")
        else:
            said.append(f"{f.name} {_shown(before)} -> {_shown(after)}")
    return said


def _shown(value: object) -> str:
    return str(value.value) if isinstance(value, StrEnum) else repr(value)


def _check_formats(table: TableDef, records: Sequence[SampledRecord], force: bool) -> None:
    """Refuse (CatalogError) unless every sampled key and value decodes, or `force`."""
    from sparkiq.core.formatcheck import check_formats

    if not records:
        click.echo(
            f"note: topic {table.topic!r} holds no keyed records yet: the formats cannot be checked"
        )
        return
    findings = check_formats(table, records)
    failed = [f.describe(table.topic) for f in findings if not f.ok]
    if not failed:
        key, value = findings
        click.echo(
            f"formats: {key.checked} sampled keys decode as {key.declared.value}, "
            f"{value.checked} values as {value.declared.value}"
        )
        return
    if not force:
        raise CatalogError(
            f"table {table.name!r} not registered: "
            + "; ".join(failed)
            + "; or --force to register it anyway"
        )
    for text in failed:
        click.echo(f"warning: {text}; registered anyway (--force)")


def _check_topic_retention(
    bootstrap: str, topic: str, retention_ms: int, security: KafkaSecurity
) -> None:
    """Say so when the topic keeps its records forever or for less than the retention."""
    from sparkiq.kafka.admin import topic_config

    config = topic_config(bootstrap, topic, security=security)
    policy = config.get("cleanup.policy", "delete")
    kept = int(config.get("retention.ms", "-1"))
    if "delete" not in policy or kept < 0:
        click.echo(
            f"note: topic {topic!r} (cleanup.policy={policy}) keeps its records for good: the "
            "stores drop expired windows, but the topic grows; give it cleanup.policy="
            f"compact,delete and retention.ms of at least {retention_ms}"
        )
    elif kept < retention_ms:
        click.echo(
            f"note: topic {topic!r} deletes records after {kept} ms, before the table's "
            f"retention of {retention_ms} ms: a node restoring from scratch finds fewer windows "
            "than the others keep"
        )


def _detect_partitioner(records: Sequence[SampledRecord], table: TableDef) -> Partitioner:
    """Print which partitioner placed the sampled records, and why."""
    from sparkiq.core.placement import detect

    samples = [(r.partition, r.key) for r in records]
    if table.is_windowed:  # a windowed key ends with its window; the key alone decides
        suffix = table.window_layout.suffix_bytes
        samples = [(p, key[:-suffix]) for p, key in samples if len(key) >= suffix]
    found = detect(samples, table.partitions)
    click.echo(f"partitioner {found.chosen.value}: {found.evidence()}")
    return found.chosen


@table.command("list")
@bootstrap_option()
@app_option()
@kafka_security_options
def table_list(
    bootstrap_servers: str, app: str, kafka_config: Path | None, kafka_properties: tuple[str, ...]
) -> None:
    """List the tables in the catalog."""
    from sparkiq.kafka.catalog import read_catalog

    security = kafka_security(kafka_config, kafka_properties)

    def run() -> None:
        reach_brokers(bootstrap_servers)
        tables = read_catalog(bootstrap_servers, app=app, security=security)
        if not tables:
            click.echo("no tables registered")
        for t in sorted(tables.values(), key=lambda t: t.name):
            click.echo(
                f"{t.name}\ttopic={t.topic}\tpartitions={t.partitions}\tkind={t.kind.value}"
                f"\tkey={t.key_format.value}\tvalue={t.value_format.value}"
                f"\tpartitioner={t.partitioner.value}"
                + (f"\tretention_ms={t.retention_ms}" if t.retention_ms is not None else "")
                + (
                    f"\twindow_layout={t.window_layout.value}"
                    if t.window_layout is not WindowLayout.SPARKIQ
                    else ""
                )
            )

    run_command(run)


@table.command("drop")
@click.argument("name")
@bootstrap_option()
@app_option()
@kafka_security_options
def table_drop(
    name: str,
    bootstrap_servers: str,
    app: str,
    kafka_config: Path | None,
    kafka_properties: tuple[str, ...],
) -> None:
    """Remove table NAME from the catalog (its topic is left as it is)."""
    from sparkiq.kafka.catalog import drop_table, read_catalog

    security = kafka_security(kafka_config, kafka_properties)

    def run() -> None:
        reach_brokers(bootstrap_servers)
        tables = read_catalog(bootstrap_servers, app=app, security=security)
        if name not in tables:
            known = ", ".join(sorted(tables)) or "none"
            raise UnknownTableError(
                f"no table {name!r} in the catalog of app {app!r} (its tables: {known}); "
                "nothing dropped"
            )
        drop_table(bootstrap_servers, name, app=app, security=security)
        click.echo(f"table {name!r} dropped from the catalog")

    run_command(run)
