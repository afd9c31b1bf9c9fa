"""End to end on a secured Apache Kafka: SCRAM-SHA-512 logins over TLS (SASL_SSL), ACLs
enforced (`allow.everyone.if.no.acl.found=false`), and each sparkiq role holding exactly the
rights `sparkiq.kafka.roles` says it needs, granted by an admin through the Admin API.

The admin creates every topic and writes seeded records to the source topic; then, as real
processes, each with its own user's settings file:

- `sparkiq table create` (user "tables") registers the source topic as the table `events`;
- `sparkiq run examples/latest_value.py` (user "pipeline") materializes the table `latest`;
- two `sparkiq serve` nodes (user "serving") serve both tables: every key of the oracle (the
  last value produced per key, computed in plain Python) is asked of every node;
- a third node (user "reader": every serving right but READ on the changelog of `latest`)
  exits at start, within seconds, with one message naming the topic and the right.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import pytest
from confluent_kafka import Producer

from sparkiq.core.errors import KafkaError
from sparkiq.dev.localcluster import NodeProcess
from sparkiq.dev.localpipeline import PipelineProcess
from sparkiq.dev.ports import free_port
from sparkiq.kafka.catalog import read_catalog
from sparkiq.kafka.rights import Operation
from sparkiq.kafka.roles import app_topics, pipeline_needs, serving_needs, table_create_needs
from tests.support.secured import SecuredKafka, grants_for

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.timeout(600)]

EXAMPLE = Path(__file__).parents[2] / "examples" / "latest_value.py"
PARTITIONS = 3
KEYS, VERSIONS = 40, 3


def _logged_seconds(log: str, since: str) -> float:
    """Seconds from a node log's first timestamped line that holds *since* to its last line."""
    stamped = [
        (datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f"), line)
        for line in log.splitlines()
        if len(line) > 23 and line[:4].isdigit() and line[4] == "-"
    ]
    start = next((at for at, line in stamped if since in line), None)
    assert start is not None, log
    return (stamped[-1][0] - start).total_seconds()


def _produce(kafka: SecuredKafka, topic: str) -> dict[str, Any]:
    """VERSIONS versions of KEYS keys, as the admin; returns the oracle: the last per key."""
    producer = Producer(
        {"bootstrap.servers": kafka.bootstrap, **kafka.security("admin").librdkafka_conf()}
    )
    oracle: dict[str, Any] = {}
    for version in range(VERSIONS):
        for i in range(KEYS):
            key, value = f"k{i:03d}", {"key": i, "version": version, "pad": "x" * (i % 7)}
            producer.produce(topic, key=key.encode(), value=orjson.dumps(value))
            oracle[key] = value
    assert producer.flush(30) == 0
    return oracle


def _sparkiq(args: list[str], timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkiq", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def _wait(check: Callable[[], bool], what: str, timeout_s: float, logs: list[Path]) -> None:
    """Polls *check* until it is true. A check that asks the broker may time out on this
    loaded 2-core machine (a TLS and SCRAM handshake per client): that is "not yet", and
    the last such error is in the failure message."""
    deadline = time.monotonic() + timeout_s
    last_error = ""
    while True:
        try:
            if check():
                return
        except KafkaError as exc:
            last_error = f"\nlast error: {exc}"
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {p}\n{p.read_text()[-2000:]}" for p in logs if p.exists())
            pytest.fail(f"no {what} within {timeout_s:.0f}s{last_error}\n{tails}")
        time.sleep(0.5)


def _wrong_answers(nodes: list[NodeProcess], oracle: dict[str, Any]) -> list[str]:
    wrong = []
    for node in nodes:
        with httpx.Client(base_url=node.url, timeout=10) as http:
            for table in ("latest", "events"):
                for key, want in oracle.items():
                    resp = http.get(f"/v1/tables/{table}/keys/{quote(key)}")
                    got = resp.json().get("value") if resp.status_code == 200 else resp.text
                    if got != want:
                        wrong.append(f"{node.url} {table}/{key}: {resp.status_code} {got}")
    return wrong


def test_each_role_works_with_exactly_its_rights_and_a_missing_one_is_named_at_start(
    secured_kafka: SecuredKafka, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    kafka, app = secured_kafka, unique_name("acl")
    source, changelog = f"{app}.events", f"{app}.table.latest"
    for topic in (source, changelog):
        kafka.create_topic(topic, PARTITIONS)
    for topic in app_topics(app):
        kafka.create_topic(topic, 1)
    oracle = _produce(kafka, source)
    tables = {"latest": changelog, "events": source}
    kafka.grant("pipeline", grants_for(pipeline_needs(app, [source], [changelog])))
    kafka.grant("tables", grants_for(table_create_needs(app, source)))
    kafka.grant("serving", grants_for(serving_needs(app, tables)))
    lacking = [n for n in serving_needs(app, tables) if n.name != changelog]
    assert len(lacking) == len(serving_needs(app, tables)) - 1
    kafka.grant("reader", grants_for(lacking))

    created = _sparkiq(
        [
            *("table", "create", "events", "--topic", source, "--app", app),
            *("--bootstrap-servers", kafka.bootstrap),
            *("--kafka-config", str(kafka.config_file("tables"))),
        ]
    )
    assert created.returncode == 0, created.stdout + created.stderr
    assert f"table 'events' registered: topic {source!r}, {PARTITIONS} partitions" in (
        created.stdout
    )

    pipeline = PipelineProcess(
        pipeline_file=EXAMPLE,
        bootstrap_servers=kafka.bootstrap,
        checkpoint_dir=tmp_path / "checkpoints",
        log_path=tmp_path / "pipeline.log",
        app=app,
        params={"topic": source, "table": "latest", "partitions": str(PARTITIONS)},
        kafka_config=kafka.config_file("pipeline"),
    )

    def node(user: str, name: str) -> NodeProcess:
        return NodeProcess(
            port=free_port(),
            state_dir=tmp_path / name,
            bootstrap_servers=kafka.bootstrap,
            app=app,
            log_path=tmp_path / f"{name}.log",
            extra_args=("--kafka-config", str(kafka.config_file(user))),
        )

    nodes = [node("serving", "node-1"), node("serving", "node-2")]
    refused = node("reader", "node-reader")
    logs = [pipeline.log_path, *(n.log_path for n in (*nodes, refused))]
    try:
        pipeline.start()
        admin = kafka.security("admin")
        _wait(
            lambda: "latest" in read_catalog(kafka.bootstrap, app=app, security=admin),
            "table 'latest' in the catalog",
            240,
            logs,
        )
        # The nodes start while Spark still works: both tables are in the catalog now.
        for n in (*nodes, refused):
            n.start()
        assert refused.proc is not None
        code = refused.proc.wait(timeout=120)
        said = refused.log_path.read_text()
        assert code == 2, said
        # Refused at start, by the check of the changelogs' rights, not after retries: the
        # node never joined its group, and the check is timed by the node's own log, from the
        # catalog read (its file budget for the tables, logged just before the check) to its
        # stop. What came before (the interpreter's start, the first connections to the broker)
        # is not counted: on a busy machine (the other test worker may be starting dozens of
        # processes beside Spark) it took up to 18 s.
        assert "joined group" not in said, said
        assert "generation" not in said, said
        took = _logged_seconds(said, since="stores of up to")
        assert took < 20, f"the refused node's check took {took:.1f}s, catalog read to stop"
        assert (
            f"cannot start the serving node of app {app!r}: principal User:reader may not "
            f"{Operation.READ.value} topic {changelog} (TOPIC_AUTHORIZATION_FAILED) (needed to "
            "restore table 'latest')"
        ) in said, said
        assert f"--allow-principal User:reader --operation Read --topic {changelog}" in said
        assert kafka.passwords["reader"] not in said

        # Every invoice was produced before the pipeline started: the ends are read once,
        # and the wait reads the pipeline's status file alone.
        ends: dict[tuple[str, int], int] = {}

        def read_ends() -> bool:
            ends.update(pipeline.end_offsets([source]))
            return True

        _wait(read_ends, "end offsets of the source", 60, logs)
        _wait(lambda: pipeline.processed_through(ends), "pipeline caught up", 240, logs)
        _wait(lambda: all(n.is_ready() for n in nodes), "ready nodes", 120, logs)
        wrong: list[str] = []

        def answers_right() -> bool:
            nonlocal wrong
            wrong = _wrong_answers(nodes, oracle)
            return not wrong

        _wait(answers_right, "right answers from every node", 60, logs)
        assert not wrong
        # Nothing a role does on this test's topics was refused. (The librdkafka consumers
        # that only assign name a group they never join: looking up its coordinator is
        # refused, and harmless. The broker is shared: other tests' refusals are theirs.)
        ours = {source, changelog, *app_topics(app)}
        for user in ("pipeline", "serving", "tables"):
            on_topics = [
                d
                for d in kafka.denials(user)
                if any(f"resource = Topic:LITERAL:{t} " in d for t in ours)
            ]
            assert on_topics == [], f"{user} was refused: {on_topics[:3]}"
    finally:
        pipeline.stop()
        for n in (*nodes, refused):
            n.stop()
