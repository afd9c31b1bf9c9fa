"""The `sparkiq` commands of cli/main.py: `watch` and `changes` print each event; `broker`
starts Apache Kafka (or the dev broker) until SIGTERM; `install` says where the jars are."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient

from sparkiq.cli.main import main
from sparkiq.core.tables import TableDef
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpServer, HttpSettings
from sparkiq.http.staticview import DictStore
from tests.support.mapview import MapView

USERS = TableDef("users", "users-changelog", 2)


async def test_watch_prints_the_state_then_each_change_as_json_lines() -> None:
    port = free_port()
    me = f"http://127.0.0.1:{port}"
    view = MapView(me, [USERS])
    for p in range(USERS.partitions):
        view.set_placement((USERS.topic, p), me, store=DictStore())
    view.apply(USERS, "alice", {"n": 1})
    async with HttpServer(view, "127.0.0.1", port, HttpSettings()):
        args = ["watch", "users", "alice", "--url", me, "--count", "3"]
        running = asyncio.create_task(asyncio.to_thread(CliRunner().invoke, main, args))
        for _ in range(500):
            if view.watcher_count():
                break
            await asyncio.sleep(0.01)
        view.apply(USERS, "alice", {"n": 2})
        view.apply(USERS, "alice", None)
        async with asyncio.timeout(10):
            result = await running
    assert result.exit_code == 0, result.output
    lines = [orjson.loads(line) for line in result.output.splitlines()]
    assert [line["value"] for line in lines] == [{"n": 1}, {"n": 2}, None]
    assert {line["key"] for line in lines} == {"alice"}


async def test_changes_prints_each_change_of_the_range_as_json_lines() -> None:
    port = free_port()
    me = f"http://127.0.0.1:{port}"
    view = MapView(me, [USERS])
    for p in range(USERS.partitions):
        view.set_placement((USERS.topic, p), me, store=DictStore())
    view.apply(USERS, "alice", {"n": 1})  # before the watch: not printed
    async with HttpServer(view, "127.0.0.1", port, HttpSettings()):
        args = ["changes", "users", "--prefix", "al", "--url", me, "--count", "3"]
        running = asyncio.create_task(asyncio.to_thread(CliRunner().invoke, main, args))
        for _ in range(500):
            if view.watcher_count() == USERS.partitions:
                break
            await asyncio.sleep(0.01)
        view.apply(USERS, "alice", {"n": 2})
        view.apply(USERS, "bob", {"n": 3})
        view.apply(USERS, "alfred", {"n": 4})
        view.apply(USERS, "alice", None)
        async with asyncio.timeout(10):
            result = await running
    assert result.exit_code == 0, result.output
    lines = [orjson.loads(line) for line in result.output.splitlines()]
    assert len(lines) == 3  # bob is not in the range
    assert [line["value"] for line in lines if line["key"] == "alice"] == [{"n": 2}, None]
    assert [line["value"] for line in lines if line["key"] == "alfred"] == [{"n": 4}]


def test_changes_refuses_a_prefix_with_bounds() -> None:
    result = CliRunner().invoke(main, ["changes", "users", "--prefix", "a", "--from", "b"])
    assert result.exit_code == 2
    assert "not both" in result.output


def _broker_command(*args: str) -> tuple[str, str]:
    """Run `sparkiq broker ARGS` until it has printed its address, check that the broker
    answers there, stop it with SIGTERM; its output and what it answered."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkiq", "broker", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "export SPARKIQ_BOOTSTRAP_SERVERS=" in line:
                break
        out = "".join(lines)
        found = re.search(r"SPARKIQ_BOOTSTRAP_SERVERS=(\S+)", out)
        assert found, out
        admin = AdminClient({"bootstrap.servers": found.group(1)})
        brokers = admin.list_topics(timeout=10).brokers
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + rest
    return out, f"{len(brokers)} brokers"


def test_broker_runs_apache_kafka_and_removes_its_data_when_stopped() -> None:
    out, answered = _broker_command()
    assert answered == "1 brokers"
    assert "Apache Kafka 4.4.0 (KRaft, 1 node)" in out
    data = re.search(r"data and logs in (\S+);", out)
    assert data, out
    assert not Path(data.group(1)).exists()


def test_broker_three_nodes() -> None:
    out, answered = _broker_command("--brokers", "3")
    assert answered == "3 brokers"
    assert "(KRaft, 3 nodes)" in out


def test_broker_kind_dev() -> None:
    out, answered = _broker_command("--kind", "dev")
    assert answered == "1 brokers"
    assert out.startswith("dev broker (Tansu)")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--kind", "dev", "--brokers", "3"], "the dev broker runs as one node"),
        (["--port", "9092"], "--port is for the dev broker"),
    ],
)
def test_broker_refuses_what_it_cannot_do(args: list[str], said: str) -> None:
    result = CliRunner().invoke(main, ["broker", *args])
    assert result.exit_code == 2
    assert said in result.output


def test_install_says_where_the_jars_are() -> None:
    result = CliRunner().invoke(main, ["install", "kafka"])
    assert result.exit_code == 0, result.output
    assert re.search(r"Apache Kafka 4\.4\.0: \d+ jars in \S+kafka-4\.4\.0", result.output)


def test_install_spark_kafka_installs_the_connector_of_the_installed_pyspark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyspark

    monkeypatch.setenv("SPARKIQ_JARS_DIR", str(tmp_path))
    result = CliRunner().invoke(main, ["install", "spark-kafka"])
    assert result.exit_code == 0, result.output
    version = re.escape(pyspark.__version__)
    assert re.search(
        rf"Kafka connector {version}: 4 jars in \S+spark-kafka-{version}", result.output
    )
    folder = tmp_path / f"spark-kafka-{pyspark.__version__}"
    assert sorted(j.name.rsplit("-", 1)[0] for j in folder.glob("*.jar")) == [
        "commons-pool2",
        "kafka-clients",
        "spark-sql-kafka-0-10_2.13",
        "spark-token-provider-kafka-0-10_2.13",
    ]


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (
            ["--url", "NODE"],
            {},
            "sparkiq: no node accepted a connection: NODE: [Errno 111] Connection refused; "
            "give a running node's URL with --url (or SPARKIQ_URL)",
        ),
        (
            [],
            {"SPARKIQ_URL": "NODE"},
            "sparkiq: no node accepted a connection: NODE: [Errno 111] Connection refused; "
            "the URL came from SPARKIQ_URL: set it to a running node's URL, or give --url",
        ),
        (
            ["--url", "127.0.0.1:9"],
            {},
            "sparkiq: node URL '127.0.0.1:9' is not http(s)://HOST[:PORT]; write e.g. "
            "http://127.0.0.1:9 (given with --url)",
        ),
    ],
    ids=["refused", "refused-from-env", "malformed"],
)
@pytest.mark.parametrize(
    "command",
    [["get", "t", "k"], ["watch", "t", "k"], ["range", "t"], ["changes", "t"], ["cluster"]],
)
def test_a_client_command_whose_node_refuses_fails_at_once_saying_how_to_point_it(
    command: list[str], args: list[str], env: dict[str, str], said: str
) -> None:
    node = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    args = [a.replace("NODE", node) for a in args]
    env = {k: v.replace("NODE", node) for k, v in env.items()}
    started = time.monotonic()
    result = CliRunner().invoke(main, [*command, *args], env=env)
    assert result.exit_code == 2
    assert result.output.splitlines() == [said.replace("NODE", node)]
    assert time.monotonic() - started < 3.0


def test_without_url_the_default_node_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARKIQ_URL", raising=False)
    result = CliRunner().invoke(main, ["get", "t", "k"])
    assert result.exit_code == 2
    assert result.output.strip().endswith(
        "no --url was given, so http://127.0.0.1:8100 was asked: give a running node's URL "
        "with --url or SPARKIQ_URL"
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--listen", "127.0.0.1:0"],
            "Error: --listen: listen must be host:port with a port of 1-65535, got "
            "'127.0.0.1:0'; write e.g. --listen 127.0.0.1:8101",
        ),
        (
            ["--advertised-url", "node-1"],
            "Error: advertised URL 'node-1' must be http(s)://HOST:PORT, the address other "
            "nodes and clients reach this node at; write e.g. --advertised-url "
            "http://10.0.0.5:8101",
        ),
    ],
)
def test_a_bad_serve_setting_is_one_line_saying_what_to_write(args: list[str], said: str) -> None:
    result = CliRunner().invoke(
        main, ["serve", "--bootstrap-servers", "127.0.0.1:1", "--auth", "none", *args]
    )
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == said
    assert "pydantic" not in result.output


def test_serve_with_an_unreachable_broker_says_so_at_once_in_one_line() -> None:
    closed = free_port()
    started = time.monotonic()
    serve = ["serve", "--bootstrap-servers", f"127.0.0.1:{closed}", "--auth", "none"]
    done = subprocess.run(
        [sys.executable, "-m", "sparkiq", *serve, "--listen", f"127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"sparkiq: cannot reach a Kafka broker at 127.0.0.1:{closed} (127.0.0.1:{closed}: "
        "connection refused); check --bootstrap-servers (or SPARKIQ_BOOTSTRAP_SERVERS) and "
        "that the brokers run and listen there"
    ]
    assert time.monotonic() - started < 5.0


def test_a_negative_max_lag_is_refused_before_any_node_is_asked() -> None:
    result = CliRunner().invoke(main, ["get", "t", "k", "--max-lag", "-5"])
    assert result.exit_code == 2
    assert "-5 is not in the range x>=0" in result.output
