"""`sparkiq cluster --watch` (clusterview.watch_cluster): redraws, and survives dead nodes."""

from __future__ import annotations

import io

import httpx
import orjson

from sparkiq.cli.clusterview import render_cluster, watch_cluster
from sparkiq.dev.ports import free_port


def test_watch_renders_each_round_and_goes_on_when_no_node_answers() -> None:
    out = io.StringIO()
    pauses: list[float] = []
    dead = f"http://127.0.0.1:{free_port()}"
    watch_cluster([dead], interval_s=0.5, out=out, rounds=3, sleep=pauses.append)
    text = out.getvalue()
    assert text.count("(every 0.5s)") == 3
    assert text.count("no node accepted a connection") == 3
    assert "\x1b[2J" not in text  # not a terminal: blocks one after another
    assert pauses == [0.5, 0.5]  # no pause after the last round


def test_faults_and_rebuilds_are_shown() -> None:
    url = "http://node-a:8100"
    meta = {
        "generation": 3,
        "nodes": [{"url": url, "active": [["items", 0], ["items", 1]]}],
        "tables": [
            {
                "name": "items",
                "partitioner": "murmur2",
                "misplaced_records": 0,
                "newest_record_age_s": 0.84,
                "last_batch_age_s": None,
            }
        ],
        "refused": [],
        "local": [
            {
                "table": "items",
                "partition": 0,
                "state": "failed",
                "position": 10,
                "end": 12,
                "lag": 2,
                "fault": "reading the store at /s/items/0 failed: Corruption: bad block",
                "rebuilds": 0,
            },
            {
                "table": "items",
                "partition": 1,
                "state": "active",
                "position": 12,
                "end": 12,
                "lag": 0,
                "fault": None,
                "rebuilds": 2,
            },
        ],
    }

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/metadata"
        return httpx.Response(200, content=orjson.dumps(meta))

    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        text = render_cluster([url], http=http)
    assert f"FAULT: {url} items[0]: reading the store at /s/items/0 failed: Corruption" in text
    assert f"REBUILT: {url} items[1]: 2 time(s) from the changelog" in text
    row = next(line for line in text.splitlines() if " items " in line and "   0  " in line)
    assert "failed" in row  # the replica's row says its state
    # Each node's freshness of each table: the newest record's age; no pipeline: "-".
    assert f"{url:<28} {'items':<20} {'0.8 s':>13} {'-':>10}" in text.splitlines()


def test_a_global_table_s_replicas_show_the_role_global() -> None:
    url = "http://node-a:8100"
    replica = {"position": 3, "end": 3, "lag": 0, "fault": None, "rebuilds": 0}
    meta = {
        "generation": 1,
        "nodes": [{"url": url, "active": [["items", 0]], "standby": [["stores", 0]]}],
        "tables": [
            {"name": "items", "kind": "kv", "partitioner": "murmur2", "misplaced_records": 0},
            {"name": "stores", "kind": "global", "partitioner": "murmur2", "misplaced_records": 0},
        ],
        "refused": [],
        "local": [
            {"table": "items", "partition": 0, "state": "active", **replica},
            {"table": "stores", "partition": 0, "state": "active", **replica},
        ],
    }

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=orjson.dumps(meta))

    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        text = render_cluster([url], http=http)
    assert "table stores: partitioner murmur2, 0 misplaced records  (global: every node" in text
    rows = {
        line.split()[1]: line.split()[3]
        for line in text.splitlines()
        if line.startswith(url) and line.split()[2].isdigit()  # replicas (partition numbers)
    }
    assert rows == {"items": "active", "stores": "global"}
