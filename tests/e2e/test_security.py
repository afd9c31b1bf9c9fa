"""End to end: two `sparkiq serve` processes with TLS, bearer tokens, API keys and a cluster
secret, over Apache Kafka; every key checked against the oracle through both nodes."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkiq.auth.apikeys import digest
from sparkiq.auth.cluster import ClusterCredential
from sparkiq.core.tables import Format, TableDef
from sparkiq.dev.localcluster import LocalCluster
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import register_table
from tests.support.auth import CLUSTER_SECRET, SECRET, hs256, make_tls, tamper, write
from tests.support.e2e import Oracle, produce_seeded

pytestmark = pytest.mark.e2e

API_KEY = "items-reader-key-0001"


@pytest.fixture(scope="module")
def secured(
    bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LocalCluster, Oracle, Path]]:
    work = tmp_path_factory.mktemp("secured")
    app = f"sec{int(time.time() * 1000) % 10**9}"
    topic, private_topic = f"{app}-items", f"{app}-private"
    create_topic(bootstrap, topic, 6)
    create_topic(bootstrap, private_topic, 2)
    oracle = produce_seeded(bootstrap, topic, keys=1_000, updates=2, deletes=100, seed=5)
    for name, t, n in (("items", topic, 6), ("private", private_topic, 2)):
        register_table(
            bootstrap,
            TableDef(name, t, n, key_format=Format.STRING, value_format=Format.JSON),
            app=app,
        )
    tls = make_tls(work)
    keys = write(
        work / "keys.json",
        json.dumps(
            {"keys": [{"name": "items-reader", "sha256": digest(API_KEY), "tables": ["items"]}]}
        ).encode(),
    )
    auth_args = [
        "--jwt-secret-file", str(write(work / "jwt.secret", SECRET)),
        "--api-keys-file", str(keys),
        "--cluster-secret-file", str(write(work / "cluster.secret", CLUSTER_SECRET)),
    ]  # fmt: skip
    tls_args = [
        "--tls-cert-file", str(tls.cert_file),
        "--tls-key-file", str(tls.key_file),
        "--tls-ca-file", str(tls.ca_file),
    ]  # fmt: skip
    cluster = LocalCluster(
        bootstrap,
        work / "nodes",
        nodes=2,
        app=app,
        auth_args=auth_args,
        extra_args=tls_args,
        headers={"authorization": f"Bearer {hs256('*')}"},
        ca_file=tls.ca_file,
    )
    cluster.start()
    try:
        # Until no partition is warming: a node that joined serves every key at once (ready)
        # but owns actives only once its warm-ups end, and the tests need both local and
        # forwarded answers.
        cluster.wait_moved(90)
        yield cluster, oracle, tls.ca_file
    finally:
        cluster.stop()


async def _get_all(
    url: str, keys: list[str], headers: dict[str, str], ca: Path
) -> dict[str, tuple[int, Any]]:
    out: dict[str, tuple[int, Any]] = {}
    limit = asyncio.Semaphore(16)
    async with httpx.AsyncClient(
        base_url=url, headers=headers, verify=ssl.create_default_context(cafile=ca)
    ) as client:

        async def one(key: str) -> None:
            async with limit:
                r = await client.get(f"/v1/tables/items/keys/{key}")
                out[key] = (r.status_code, r.json())

        await asyncio.gather(*(one(k) for k in keys))
    return out


async def test_every_key_through_every_node_over_tls_with_a_token(
    secured: tuple[LocalCluster, Oracle, Path],
) -> None:
    cluster, oracle, ca = secured
    headers = {"authorization": f"Bearer {hs256(['items'])}"}
    for url in cluster.urls:
        assert url.startswith("https://")
        answers = await _get_all(url, sorted(set(oracle.latest) | oracle.deleted), headers, ca)
        wrong = []
        for key, (status, body) in answers.items():
            expected = oracle.latest.get(key)
            want = (404, None) if expected is None else (200, expected)
            if (status, body.get("value")) != want:
                wrong.append((key, status, body))
        assert not wrong, f"{url}: {len(wrong)} wrong, e.g. {wrong[:3]}"
        nodes = {body["node"] for status, body in answers.values() if status == 200}
        assert nodes == set(cluster.urls)  # both local and forwarded answers were checked


def test_refusals_through_each_node(secured: tuple[LocalCluster, Oracle, Path]) -> None:
    cluster, oracle, ca = secured
    key = sorted(oracle.latest)[0]
    path = f"/v1/tables/items/keys/{key}"
    cases = [
        ({}, 401),
        ({"authorization": f"Bearer {hs256(['items'], exp_in_s=-1)}"}, 401),
        ({"authorization": f"Bearer {tamper(hs256(['items']))}"}, 401),
        ({"authorization": f"Bearer {hs256(['private'])}"}, 403),
        ({"x-api-key": "wrong-key-0000000000"}, 401),
        ({"x-api-key": API_KEY}, 200),
        ({"authorization": f"Bearer {hs256(['items'])}"}, 200),
    ]
    for url in cluster.urls:  # the key is local on one node and forwarded by the other
        with httpx.Client(base_url=url, verify=ssl.create_default_context(cafile=ca)) as client:
            for headers, status in cases:
                r = client.get(path, headers=headers)
                assert r.status_code == status, (url, headers, r.text)
            # A forwarding header from outside the cluster: refused, however it is signed.
            for signature in ("", ClusterCredential(b"x" * 40).sign("GET", path, 1)):
                r = client.get(
                    path,
                    headers={
                        "authorization": f"Bearer {hs256(['items'])}",
                        "x-sparkiq-hops": "1",
                        "x-sparkiq-cluster": signature,
                    },
                )
                assert r.status_code == 403, r.text
            metrics = client.get("/metrics").text  # open by default
            refused = [
                line
                for line in metrics.splitlines()
                if line.startswith("sparkiq_http_requests_total{")
                and 'endpoint="refused"' in line
                and 'status="401"' in line
            ]
            assert refused, "401s are counted"
            assert float(refused[0].rsplit(" ", 1)[1]) >= 3
    # Plain HTTP to a TLS node gets no answer.
    with pytest.raises(httpx.HTTPError):
        httpx.get(cluster.urls[0].replace("https://", "http://") + "/healthz", timeout=3)


def test_cli_get_with_a_token_and_the_ca(secured: tuple[LocalCluster, Oracle, Path]) -> None:
    cluster, oracle, ca = secured
    key = sorted(oracle.latest)[1]
    base = [sys.executable, "-m", "sparkiq", "get", "items", key, "--url", cluster.urls[1]]
    ok = subprocess.run(
        [*base, "--token", hs256(["items"]), "--ca-file", str(ca)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["value"] == oracle.latest[key]
    denied = subprocess.run(
        [*base, "--token", hs256(["private"]), "--ca-file", str(ca)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert denied.returncode != 0
    assert "403" in denied.stderr


def test_cli_cluster_with_credentials(secured: tuple[LocalCluster, Oracle, Path]) -> None:
    cluster, _, ca = secured
    base = [sys.executable, "-m", "sparkiq", "cluster", "--url", cluster.urls[0]]
    shown = subprocess.run(
        [*base, "--token", hs256([]), "--ca-file", str(ca)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert all(url in shown.stdout for url in cluster.urls)
    refused = subprocess.run(
        [*base, "--ca-file", str(ca)], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode != 0
    assert "401" in refused.stderr
