"""Renders the cluster's state for `sparkiq cluster`: nodes, roles, lags per partition, and
how fresh each node's tables are (the age of the newest record it applied, the time since
the table's pipeline last committed a micro-batch).

`watch_cluster` renders it again every few seconds (`sparkiq cluster --watch`), redrawing
the screen on a terminal and printing one block after another otherwise.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import httpx
import orjson

from sparkiq.client.unreached import NOT_ACCEPTED, nodes_unreachable, why_not_accepted
from sparkiq.core.errors import ClientError


def fetch_metadata(
    urls: list[str], timeout_s: float = 3.0, http: httpx.Client | None = None
) -> dict[str, Any]:
    """The metadata of the first node that answers (through `http`: credentials, trust)."""
    get = http.get if http is not None else httpx.get
    errors = []
    unreached: dict[str, str] = {}
    for url in urls:
        try:
            resp = get(f"{url.rstrip('/')}/v1/metadata", timeout=timeout_s)
            if resp.status_code == 200:
                meta: dict[str, Any] = resp.json()
                return meta
            errors.append(f"{url}: HTTP {resp.status_code}")
        except NOT_ACCEPTED as exc:
            unreached[url] = why_not_accepted(exc)
            errors.append(f"{url}: {exc}")
        except httpx.HTTPError as exc:
            errors.append(f"{url}: {exc}")
    if all(url in unreached for url in urls):
        raise nodes_unreachable(unreached)
    raise ClientError("no node answered /v1/metadata: " + "; ".join(errors))


def _node_metadata(url: str, timeout_s: float, http: httpx.Client | None) -> dict[str, Any] | None:
    """A node's own metadata (its local replicas, its tables' freshness), or None."""
    get = http.get if http is not None else httpx.get
    try:
        meta: dict[str, Any] = get(f"{url}/v1/metadata", timeout=timeout_s).json()
        return meta
    except (httpx.HTTPError, ValueError):
        return None


def _age(seconds: Any) -> str:
    return "-" if seconds is None else f"{float(seconds):.1f} s"


def _freshness_lines(fresh: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Per node and table: the newest record's age and the pipeline's last batch's age."""
    if not fresh:
        return []
    lines = ["", f"{'NODE':<28} {'TABLE':<20} {'NEWEST RECORD':>13} {'LAST BATCH':>10}"]
    for url, t in fresh:
        lines.append(
            f"{url:<28} {t['name']:<20} {_age(t.get('newest_record_age_s')):>13} "
            f"{_age(t.get('last_batch_age_s')):>10}"
        )
    return lines


def render_cluster(
    urls: list[str],
    *,
    as_json: bool = False,
    timeout_s: float = 3.0,
    http: httpx.Client | None = None,
) -> str:
    meta = fetch_metadata(urls, timeout_s, http)
    if as_json:
        return orjson.dumps(meta, option=orjson.OPT_INDENT_2).decode()
    tables = meta.get("tables", [])
    lines = [
        f"generation {meta.get('generation')}, "
        f"{len(meta.get('nodes', []))} nodes, {len(tables)} tables",
    ]
    for refused in meta.get("refused", []):
        lines.append(
            f"CONFLICT: node {refused['node_id']} advertises {refused['url']}, which an "
            "earlier node has: it holds nothing until given its own --advertised-url"
        )
    for t in tables:
        misplaced = int(t.get("misplaced_records", 0))
        note = ""
        if t.get("partitioner") == "any":
            note = "  (placement unknown: every lookup asks every partition)"
        elif misplaced:
            note = "  (a key missing from its partition is looked for in all the others)"
        if t.get("kind") == "global":
            note += "  (global: every node holds every partition and answers every key)"
        lines.append(
            f"table {t['name']}: partitioner {t.get('partitioner', 'murmur2')}, "
            f"{misplaced:,} misplaced records{note}"
        )
    lines += [
        "",
        f"{'NODE':<28} {'TABLE':<20} {'PART':>4}  {'ROLE':<9} {'STATE':<9} "
        f"{'POSITION':>9} {'END':>9} {'LAG':>7} {'MISPLACED':>9}",
    ]
    faults: list[str] = []
    everywhere = {t["name"] for t in tables if t.get("kind") == "global"}
    fresh: list[tuple[str, dict[str, Any]]] = []
    for node in meta.get("nodes", []):
        url = node["url"]
        own = _node_metadata(url, timeout_s, http)
        if own is None:
            lines.append(f"{url:<28} (not answering)")
            continue
        replicas: list[dict[str, Any]] = own.get("local", [])
        fresh += [(url, t) for t in own.get("tables", [])]
        roles: dict[tuple[str, int], str] = {}
        for role in ("active", "standby", "warming"):
            for table, part in node.get(role, []):
                roles[(table, int(part))] = "global" if table in everywhere else role
        if not replicas:
            lines.append(f"{url:<28} (no partitions)")
        for r in sorted(replicas, key=lambda r: (r["table"], r["partition"])):
            role = roles.get((r["table"], int(r["partition"])), "-")
            lines.append(
                f"{url:<28} {r['table']:<20} {r['partition']:>4}  {role:<9} {r['state']:<9} "
                f"{r['position']:>9} {r['end']:>9} {r['lag']:>7} {r.get('misplaced', 0):>9}"
            )
            where = f"{url} {r['table']}[{r['partition']}]"
            if r.get("fault"):
                faults.append(f"FAULT: {where}: {r['fault']}")
            if r.get("rebuilds"):
                faults.append(
                    f"REBUILT: {where}: {r['rebuilds']} time(s) from the changelog after a "
                    "storage fault"
                )
    lines += _freshness_lines(fresh)
    if faults:
        lines += ["", *faults]
    return "\n".join(lines)


_CLEAR_SCREEN = "\x1b[H\x1b[2J"


def watch_cluster(
    urls: list[str],
    *,
    interval_s: float = 2.0,
    as_json: bool = False,
    out: TextIO | None = None,
    rounds: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
    http: httpx.Client | None = None,
) -> None:
    """Render the cluster every `interval_s` until Ctrl-C (or `rounds` times).

    A node that does not answer is shown as such and the watch goes on: it is what one
    watches a cluster for.
    """
    out = out if out is not None else sys.stdout
    live = out.isatty()
    done = 0
    try:
        while rounds is None or done < rounds:
            try:
                text = render_cluster(
                    urls, as_json=as_json, timeout_s=min(interval_s, 3.0), http=http
                )
            except ClientError as exc:
                text = f"sparkiq: {exc}"
            stamp = time.strftime("%H:%M:%S")
            out.write(f"{_CLEAR_SCREEN if live else ''}{stamp} (every {interval_s:g}s)\n")
            out.write(text + "\n" + ("" if live else "\n"))
            out.flush()
            done += 1
            if rounds is None or done < rounds:
                sleep(interval_s)
    except KeyboardInterrupt:
        pass
