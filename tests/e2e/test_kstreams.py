"""End to end: sparkiq serves a real Kafka Streams application's three stores.

The application (tests/support/kstreamsapp/IqApp.java, compiled here with javac) keeps a
KTable of profiles, a 10-second windowed count and a session count (5-second gap) of
clicks, with exactly-once processing, on one instance; its own interactive queries are
the oracle, themselves checked against plain Python first. The stores are registered with
`sparkiq table create --from-kafka-streams`; two nodes must answer every key, window and
session as the application's IQ did, also after the application has stopped; a record
written to a changelog in an aborted transaction is never served.
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from click.testing import CliRunner
from confluent_kafka import Producer

from sparkiq.cli.table import table
from sparkiq.dev.localcluster import LocalCluster
from sparkiq.kafka.admin import create_topic
from tests.support.kstreams import IqApp, compile_app, kafka_streams_jars

pytestmark = pytest.mark.e2e

PARTITIONS = 4
WINDOW_MS, GAP_MS = 10_000, 5_000
USERS = [f"u{i:03d}" for i in range(60)]
DELETED = USERS[::7]


def produce_input(bootstrap: str, profiles: str, clicks: str, seed: int) -> dict[str, Any]:
    """Profiles (three versions a user, some deleted) and clicks at chosen times, out of
    order; the plain-Python oracle of the application's three stores."""
    rng = random.Random(seed)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 20}
    )
    latest: dict[str, str] = {}
    for version in range(3):
        for user in USERS:
            value = orjson.dumps({"user": user, "version": version, "tier": rng.randrange(4)})
            producer.produce(profiles, key=user, value=value)
            latest[user] = value.decode()
    for user in DELETED:
        producer.produce(profiles, key=user, value=None)
        del latest[user]
    base = (int(time.time() * 1000) - 5 * 60_000) // WINDOW_MS * WINDOW_MS
    times: dict[str, list[int]] = defaultdict(list)
    events = []
    for user in USERS[:40]:
        at = base + rng.randrange(WINDOW_MS)
        for _ in range(rng.randrange(3, 15)):
            at += rng.choice((200, 900, 3_000, 4_900, 5_200, 12_000))
            events.append((user, at))
            times[user].append(at)
    rng.shuffle(events)  # out of order: sessions merge, windows fill late
    for user, at in events:
        producer.produce(clicks, key=user, value=b"click", timestamp=at)
    assert producer.flush(60) == 0
    windows = Counter((user, at // WINDOW_MS * WINDOW_MS) for user, at in events)
    sessions = []
    for user, ats in times.items():
        ats.sort()
        start = prev = ats[0]
        count = 0
        for at in ats:
            if at - prev > GAP_MS:
                sessions.append([user, start, prev, count])
                start, count = at, 0
            prev, count = at, count + 1
        sessions.append([user, start, prev, count])
    return {
        "profiles": latest,
        "clicks": sorted([u, s, s + WINDOW_MS, n] for (u, s), n in windows.items()),
        "sessions": sorted(sessions),
    }


def canonical(dump: dict[str, Any]) -> dict[str, Any]:
    return {
        "profiles": dump["profiles"],
        "clicks": sorted(dump["clicks"]),
        "sessions": sorted(dump["sessions"]),
    }


def abort_a_transaction(bootstrap: str, topic: str) -> None:
    """A profile written to the changelog in a transaction that aborts: never served."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-aborts"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"ghost", value=b'{"user":"ghost"}', partition=0)
    producer.produce(topic, key=USERS[1].encode(), value=b'{"aborted":true}', partition=0)
    producer.flush(30)
    producer.abort_transaction(30)


def register(bootstrap: str, app: str, app_id: str) -> None:
    stores = [
        ("profiles", ["--store", "profiles", "--store-type", "timestamped-kv"]),
        ("clicks", ["--store", "clicks", "--store-type", "timestamped-window",
                    "--window-size-ms", str(WINDOW_MS), "--value-serde", "long"]),
        ("sessions", ["--store", "sessions", "--store-type", "session", "--value-serde", "long"]),
    ]  # fmt: skip
    for name, args in stores:
        result = CliRunner().invoke(
            table,
            ["create", name, "--from-kafka-streams", app_id, *args,
             "--bootstrap-servers", bootstrap, "--app", app],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "partitioner murmur2" in result.output, result.output
    listed = CliRunner().invoke(table, ["list", "--bootstrap-servers", bootstrap, "--app", app])
    assert "window_layout=kstreams-session" in listed.output, listed.output
    refused = CliRunner().invoke(
        table,
        ["create", "scores", "--from-kafka-streams", app_id, "--store", "clicks",
         "--store-type", "timestamped-window", "--window-size-ms", "10000",
         "--value-serde", "double", "--bootstrap-servers", bootstrap, "--app", app],
    )  # fmt: skip
    assert refused.exit_code != 0
    assert "value serde 'double'" in refused.output, refused.output


def served(http: httpx.Client, url: str) -> dict[str, Any]:
    """Every key, window and session one node answers."""
    profiles = {}
    for user in [*USERS, "ghost"]:
        r = http.get(f"{url}/v1/tables/profiles/keys/{user}")
        if r.status_code == 200:
            profiles[user] = orjson.dumps(r.json()["value"]).decode()
        else:
            assert r.status_code == 404, r.text
    out: dict[str, Any] = {"profiles": profiles}
    for name in ("clicks", "sessions"):
        items: list[Any] = []
        params = {"limit": "100", "from": "0"}
        while True:
            body = http.get(f"{url}/v1/tables/{name}/windows", params=params).json()
            items += [[i["key"], i["start"], i["end"], i["value"]] for i in body["items"]]
            if body["next_cursor"] is None:
                break
            params["cursor"] = body["next_cursor"]
        out[name] = sorted(items)
    return out


def key_windows(http: httpx.Client, url: str, name: str, user: str) -> list[list[Any]]:
    body = http.get(f"{url}/v1/tables/{name}/keys/{user}/windows", params={"from": "0"}).json()
    return [[user, w["start"], w["end"], w["value"]] for w in body["items"]]


@pytest.fixture
def app_and_cluster(
    bootstrap: str, tmp_path: Path
) -> Iterator[tuple[IqApp, LocalCluster, dict[str, Any]]]:
    jars = kafka_streams_jars()
    if jars is None:
        pytest.skip("Kafka Streams is not installed (sparkiq install kafka-streams) or no javac")
    classes = compile_app(jars, tmp_path / "classes")
    suffix = int(time.time() * 1000) % 10**9
    app, app_id = f"ks{suffix}", f"iq{suffix}"
    profiles, clicks = f"{app_id}-in-profiles", f"{app_id}-in-clicks"
    for topic in (profiles, clicks):
        create_topic(bootstrap, topic, PARTITIONS)
    oracle = produce_input(bootstrap, profiles, clicks, seed=51)
    streams = IqApp(
        classes, jars, bootstrap=bootstrap, application_id=app_id, state_dir=tmp_path / "ks",
        profiles_topic=profiles, clicks_topic=clicks, log=tmp_path / "iqapp.log",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while canonical(streams.dump(tmp_path / "iq.json")) != oracle:
            assert time.monotonic() < deadline, "the application never processed its input"
            time.sleep(0.5)
        register(bootstrap, app, app_id)
        abort_a_transaction(bootstrap, f"{app_id}-profiles-changelog")
        with LocalCluster(bootstrap, tmp_path / "nodes", nodes=2, app=app) as cluster:
            cluster.wait_settled(timeout_s=120)
            yield streams, cluster, oracle
    finally:
        streams.stop()


def test_every_node_serves_the_applications_stores_as_its_own_iq_did(
    app_and_cluster: tuple[IqApp, LocalCluster, dict[str, Any]], tmp_path: Path
) -> None:
    streams, cluster, oracle = app_and_cluster
    iq = canonical(streams.dump(tmp_path / "iq-final.json"))
    assert iq == oracle
    assert any(start < end for _, start, end, _ in iq["sessions"])  # sessions that merged
    assert len(iq["sessions"]) > len({user for user, *_ in iq["sessions"]})  # and that split
    assert sum(n for *_, n in iq["sessions"]) == sum(n for *_, n in iq["clicks"])
    with httpx.Client(timeout=30) as http:
        for node in cluster.nodes:
            deadline = time.monotonic() + 60
            while (got := served(http, node.url)) != iq:
                assert time.monotonic() < deadline, (node.url, got, iq)
                time.sleep(0.5)
            for user in ("u000", "u013", "u039"):
                for name in ("clicks", "sessions"):
                    want = [row for row in iq[name] if row[0] == user]
                    assert key_windows(http, node.url, name, user) == want
        listed = {
            t["name"]: t for t in http.get(f"{cluster.nodes[0].url}/v1/tables").json()["tables"]
        }
        assert listed["sessions"]["window_layout"] == "kstreams-session"
        assert listed["clicks"]["retention_ms"] > WINDOW_MS  # the changelog's retention.ms
        streams.stop()
        for node in cluster.nodes:  # the application is gone; its state is still served
            assert served(http, node.url) == iq
