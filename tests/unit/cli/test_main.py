"""The `sparkiq` commands of cli/main.py: `watch` and `changes` print each event; `broker`
starts Apache Kafka (or the dev broker) until SIGTERM; `install` says where the jars are."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
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
