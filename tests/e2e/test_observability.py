"""End to end: the metrics and logs of two `sparkiq serve` processes as requests come in.

Two nodes with `--log-format json --access-log`, one table on Apache Kafka. `/metrics` of
both nodes is scraped before and after requests and after more data is produced: the
request counters, partition gauges and restore counters are there with their labels, and
they move. A request sent to the node that does not own its key, with an `x-request-id`,
shows up under that id in both nodes' JSON logs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkiq.core.tables import Format, TableDef
from sparkiq.dev.localcluster import LocalCluster, NodeProcess
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from tests.support.e2e import Oracle, produce_seeded

pytestmark = pytest.mark.e2e

TABLE = "obs"
PARTITIONS = 4

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def app_id() -> str:
    return f"obs{int(time.time() * 1000) % 10**9}"


@pytest.fixture(scope="module")
def topic(bootstrap: str, app_id: str) -> str:
    name = f"{app_id}-items"
    create_topic(bootstrap, name, PARTITIONS)
    register_table(
        bootstrap,
        TableDef(
            name=TABLE,
            topic=name,
            partitions=PARTITIONS,
            key_format=Format.STRING,
            value_format=Format.JSON,
        ),
        app=app_id,
    )
    return name


@pytest.fixture(scope="module")
def oracle(bootstrap: str, topic: str) -> Oracle:
    return produce_seeded(bootstrap, topic, keys=500, updates=2, deletes=0, seed=5)


@pytest.fixture(scope="module")
def cluster(
    bootstrap: str, app_id: str, oracle: Oracle, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    base: Path = tmp_path_factory.mktemp("obs")
    with LocalCluster(
        bootstrap, base, nodes=2, app=app_id, extra_args=("--log-format", "json", "--access-log")
    ) as c:
        # Until no partition is warming: a node that joined is ready while its replicas still
        # warm (no active yet, maybe nothing restored), and the test reads both nodes' restores.
        c.wait_moved(timeout_s=60)
        yield c


def scrape(node: NodeProcess) -> Samples:
    resp = httpx.get(f"{node.url}/metrics", timeout=5.0)
    assert resp.status_code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(resp.text)
        for s in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def labelled(samples: Samples, name: str) -> list[dict[str, str]]:
    return [dict(ls) for (n, ls) in samples if n == name]


def json_log(node: NodeProcess) -> list[dict[str, Any]]:
    lines = []
    for raw in node.log_path.read_bytes().splitlines():
        if raw.startswith(b"{"):
            try:
                lines.append(orjson.loads(raw))
            except orjson.JSONDecodeError:
                continue
    return lines


def test_metrics_and_logs_follow_the_cluster(
    cluster: LocalCluster, oracle: Oracle, bootstrap: str, topic: str
) -> None:
    a, b = cluster.nodes
    before = [scrape(a), scrape(b)]
    for samples in before:
        assert total(samples, "sparkiq_ready") == 1
        assert total(samples, "sparkiq_tables") == 1
        assert total(samples, "sparkiq_cluster_nodes") == 2
        states = {ls["state"] for ls in labelled(samples, "sparkiq_partitions")}
        assert states == {"restoring", "active", "standby", "warming", "failed"}
        assert total(samples, "sparkiq_partitions", state="failed") == 0
        for ls in labelled(samples, "sparkiq_partition_lag"):
            assert ls["table"] == TABLE
            assert set(ls) == {"table", "partition", "state"}
        assert total(samples, "sparkiq_restore_records_total") > 0
    # Both nodes hold the same generation; every partition is active on exactly one of them,
    # and (one standby each) followed by the other.
    assert total(before[0], "sparkiq_group_generation") == total(
        before[1], "sparkiq_group_generation"
    )
    actives = sum(total(s, "sparkiq_partitions", table=TABLE, state="active") for s in before)
    assert actives == PARTITIONS
    followed = sum(
        total(s, "sparkiq_partitions", table=TABLE, state=state)
        for s in before
        for state in ("active", "standby", "warming", "restoring")
    )
    assert followed == 2 * PARTITIONS

    # Requests: every key through node a, about half of them forwarded to b.
    keys = sorted(oracle.latest)[:60]
    with httpx.Client(timeout=5.0) as client:
        for key in keys:
            assert client.get(f"{a.url}/v1/tables/{TABLE}/keys/{key}").status_code == 200
        assert client.get(f"{a.url}/v1/tables/{TABLE}/keys/absent-key").status_code == 404
    after = [scrape(a), scrape(b)]
    key_a = {
        outcome: total(after[0], "sparkiq_http_requests_total", endpoint="key", outcome=outcome)
        - total(before[0], "sparkiq_http_requests_total", endpoint="key", outcome=outcome)
        for outcome in ("local", "forwarded", "standby")
    }
    assert key_a["local"] + key_a["forwarded"] + key_a["standby"] == len(keys) + 1
    assert key_a["local"] > 0
    assert key_a["forwarded"] > 0
    assert total(after[0], "sparkiq_http_requests_total", endpoint="key", status="404") >= 1
    # b answered a's forwards from its own actives: local, on b.
    served_by_b = total(
        after[1], "sparkiq_http_requests_total", endpoint="key", outcome="local"
    ) - total(before[1], "sparkiq_http_requests_total", endpoint="key", outcome="local")
    assert served_by_b >= key_a["forwarded"]
    assert total(after[0], "sparkiq_http_request_seconds_count", endpoint="key") > total(
        before[0], "sparkiq_http_request_seconds_count", endpoint="key"
    )

    # More data: both nodes apply it (actives and standbys), and their counters grow.
    records = [total(s, "sparkiq_restore_records_total") for s in after]
    produce_seeded(bootstrap, topic, keys=200, updates=1, deletes=0, seed=6)
    deadline = time.monotonic() + 20
    while True:
        now = [total(scrape(n), "sparkiq_restore_records_total") for n in (a, b)]
        if all(n >= r + 200 for n, r in zip(now, records, strict=True)):
            break
        assert time.monotonic() < deadline, f"restore records {records} -> {now}"
        time.sleep(0.2)

    # The access log: one JSON line per answered request on a.
    access = [e for e in json_log(a) if e.get("logger") == "sparkiq.access"]
    assert sum(1 for e in access if e["endpoint"] == "key") >= len(keys) + 1
    line = next(e for e in access if e["outcome"] == "forwarded")
    assert line["status"] == 200
    assert line["node"] == a.url
    assert isinstance(line["ms"], float)
    assert all({"time", "level", "message", "request_id", "exception"} <= set(e) for e in access)

    # A request id sent to the node that does not own the key is in both nodes' logs.
    key = next(k for k in keys if _owner(a, k) == b.url)
    request_id = f"obs-{uuid.uuid4().hex[:12]}"
    resp = httpx.get(
        f"{a.url}/v1/tables/{TABLE}/keys/{key}", headers={"x-request-id": request_id}, timeout=5
    )
    assert resp.status_code == 200
    assert resp.headers.get("x-request-id") == request_id  # echoed by the first node
    deadline = time.monotonic() + 5
    while True:
        seen = [[e for e in json_log(n) if e.get("request_id") == request_id] for n in (a, b)]
        if all(seen):
            break
        assert time.monotonic() < deadline, f"request id {request_id} in logs: {seen}"
        time.sleep(0.1)
    assert any(e.get("outcome") == "forwarded" for e in seen[0])
    assert any(e.get("outcome") == "local" for e in seen[1])


def _owner(node: NodeProcess, key: str) -> str:
    resp = httpx.get(f"{node.url}/v1/tables/{TABLE}/keys/{key}/owner", timeout=5.0)
    active: str = resp.json()["active"]
    return active
