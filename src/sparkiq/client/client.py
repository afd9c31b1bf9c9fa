"""The Python client: routes each key straight to the node that owns it.

The client reads `GET /v1/metadata` from any node, computes a key's partition with the
table's partitioner (as the nodes do: murmur2, crc32 or fnv1a, per table) and sends the
request to that partition's active node: `get`, `windows`, `owner` and `watch` go to the
key's owner, `multi_get` sends one request per owner, in parallel, and `range`,
`window_range` and `changes` go to the node that holds most of the table's partitions (paged
reads: `sparkiq.client.pages`). A table of partitioner `any` has no owner per key: its calls
go to any node, which asks every partition. When the active cannot answer (refused, timed
out, 502/503/504/508) it asks the partition's standbys next, with `max_lag` set to its lag
bound (`max_lag` if given, else `standby_max_lag`), so a standby answers from its own
replica; then any node, which forwards or stands in itself.
It goes round that list, refreshing the map at most once a second, until its budget is
spent; only then does a request fail. Errors are `ClientError`.

Reads are monotonic by default: the client keeps the newest consistency token it saw per
table (`token`) and sends it with every read of that table as `after=`, so no answer --
from whichever node, across a failover -- is older than one it already had.
"""

from __future__ import annotations

import contextlib
import itertools
import ssl
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import orjson

from sparkiq.client.pages import Time, key_text, page_query, paged
from sparkiq.client.routes import Routes, dedupe, parse_routes
from sparkiq.client.streams import follow
from sparkiq.client.unreached import NOT_ACCEPTED, nodes_unreachable, why_not_accepted
from sparkiq.core.errors import BadNodeUrl, ClientError, FormatError
from sparkiq.core.positions import BadPositions, TokenBook
from sparkiq.core.serde import key_codec
from sparkiq.core.tables import Format
from sparkiq.http.messages.errorcodes import ErrorCode
from sparkiq.http.tls import client_context

# 508: the nodes disagreed on a partition's owner while a rebalance spread; asked again (or
# another node), the answer comes.
_RETRYABLE = frozenset({429, 502, 503, 504, 508})


def credential_headers(token: str | None, api_key: str | None) -> dict[str, str]:
    """The headers that carry a bearer token or an API key (at most one of them)."""
    if token is not None and api_key is not None:
        raise ClientError("give a token or an API key, not both")
    if token is not None:
        return {"authorization": f"Bearer {token}"}
    if api_key is not None:
        return {"x-api-key": api_key}
    return {}


class Client:
    """A sparkiq client over HTTP; `urls` are any nodes of the cluster."""

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        timeout_s: float = 5.0,
        budget_s: float = 10.0,
        max_lag: int | None = None,
        standby_max_lag: int = 10_000,
        refresh_interval_s: float = 30.0,
        headers: dict[str, str] | None = None,
        token: str | None = None,
        api_key: str | None = None,
        ca_file: str | Path | None = None,
        monotonic: bool = True,
        wait_for_unreachable: bool = True,
    ) -> None:
        """`token` (a bearer JWT) or `api_key` authenticate every request; `ca_file` is
        the CA that https:// nodes' certificates are checked against (default: the
        system's trust store). `monotonic`: send each read the newest consistency token
        seen for its table (see the module). `wait_for_unreachable`: when no node a call
        asks accepts a connection, try again until the budget is spent (nodes may be
        restarting); False fails the call at once with `NodesUnreachable` (the command
        line's choice: a wrong URL is said at once). A URL that is not
        http(s)://HOST[:PORT] raises `BadNodeUrl` here."""
        seeds = [urls] if isinstance(urls, str) else list(urls)
        if not seeds:
            raise BadNodeUrl("Client needs at least one node URL, e.g. http://127.0.0.1:8100")
        self._seeds = [checked_node_url(u) for u in seeds]
        self._wait_for_unreachable = wait_for_unreachable
        self._budget_s = budget_s
        self._max_lag = max_lag
        self._standby_max_lag = standby_max_lag
        self._timeout_s = timeout_s
        self._refreshed_at = 0.0
        self._refresh_interval_s = refresh_interval_s
        sent = credential_headers(token, api_key)
        sent.update(headers or {})
        verify: ssl.SSLContext | bool = client_context(Path(ca_file)) if ca_file else True
        self._http = httpx.Client(timeout=timeout_s, headers=sent, verify=verify)
        self._routes = Routes(nodes=list(self._seeds))
        self._rr = itertools.count()
        self._tokens = TokenBook() if monotonic else None

    # ---- public API -----------------------------------------------------------------

    def token(self, table: str) -> str:
        """The newest consistency token seen for `table` ("" if none): hand it to another
        client's `observe` to read at least as fresh an answer there."""
        return self._tokens.token(table) if self._tokens is not None else ""

    def observe(self, table: str, token: str) -> None:
        """Reads of `table` from now on reflect at least `token` (another answer's)."""
        if self._tokens is None:
            raise ClientError("this client was made with monotonic=False: it sends no token")
        try:
            self._tokens.observe(table, token)
        except BadPositions as exc:
            raise ClientError(f"{token[:80]!r} is not a consistency token: {exc}") from exc

    def tables(self) -> list[dict[str, Any]]:
        """The tables the caller may read, as `GET /v1/tables` lists them (a dict each:
        name, topic, partitions, kind, formats, partitioner, ...), from any node."""
        tables: list[dict[str, Any]] = self._request_any("GET", "/v1/tables")["tables"]
        return tables

    def metadata(self) -> dict[str, Any]:
        """The cluster map as any node sees it: the answer of `GET /v1/metadata` (nodes,
        tables, each partition's active, standbys and lags, the node's own replicas)."""
        return self._request_any("GET", "/v1/metadata")

    def get_entry(self, table: str, key: object) -> dict[str, Any] | None:
        """The whole answer for one key, or None if the key is absent: a dict of `table`,
        `key`, `value`, `partition`, `offset` (the changelog offset the answer reflects),
        `token` (the consistency token), `node` (the URL that read it) and `standby`."""
        text = key_text(key)
        path = f"/v1/tables/{quote(table, safe='')}/keys/{quote(text, safe='')}"
        return self._request_routed("GET", path, table, text, absent_ok=True)

    def get(self, table: str, key: object) -> Any:
        """The value of one key only, or None if the key is absent (`get_entry` gives the
        whole answer: partition, offset, token, node)."""
        entry = self.get_entry(table, key)
        return None if entry is None else entry["value"]

    def multi_get(self, table: str, keys: Iterable[object]) -> list[dict[str, Any]]:
        """Items {"key", "value"} in the order of `keys` (value None when absent).

        One request per owner node with the keys it owns, in parallel; keys whose owner is
        not known (a table of partitioner `any`, a key that does not parse) go to any node.
        """
        wanted = list(keys)
        path = f"/v1/tables/{quote(table, safe='')}/multi-get"
        groups: dict[str | None, list[int]] = defaultdict(list)
        fallbacks: dict[str | None, dict[str, None]] = defaultdict(dict)  # ordered sets
        for i, key in enumerate(wanted):
            active, standbys = self._replicas(table, key_text(key))
            groups[active].append(i)
            fallbacks[active].update(dict.fromkeys(standbys))

        def ask(active: str | None, indices: list[int]) -> list[Any]:
            body = {"keys": [wanted[i] for i in indices]}
            plan = partial(self._owner_plan, active, list(fallbacks[active]))
            answer = self._send("POST", path, plan, json_body=body, table=table)
            assert answer is not None
            items: list[Any] = answer["items"]
            return items

        if len(groups) <= 1:  # one owner (or no key): no thread for it
            answers = [(ix, ask(active, ix)) for active, ix in groups.items()]
        else:
            with ThreadPoolExecutor(max_workers=min(len(groups), 16)) as pool:
                futures = [(ix, pool.submit(ask, active, ix)) for active, ix in groups.items()]
                answers = [(ix, future.result()) for ix, future in futures]
        items: list[dict[str, Any]] = [{} for _ in wanted]
        for indices, got in answers:
            for i, item in zip(indices, got, strict=True):
                items[i] = item
        return items

    def range(
        self,
        table: str,
        *,
        from_: object | None = None,
        to: object | None = None,
        prefix: str | None = None,
        page_size: int = 500,
        order: str = "asc",
    ) -> Iterator[tuple[Any, Any]]:
        """An iterator of every (key, value) in key order (`order="desc"`: from the last key
        down) between `from_` and `to` (inclusive) or with `prefix`, following cursors page
        by page."""
        params = page_query(None, None, order, page_size, **{"from": from_, "to": to})
        if prefix is not None:
            params["prefix"] = prefix
        path = f"/v1/tables/{quote(table, safe='')}/range"
        plan = partial(self._owner_plan, self._holder_of_most(table), ())
        for item in paged(lambda q: self._send("GET", path, plan, params=q, table=table), params):
            yield item["key"], item["value"]

    def windows(
        self,
        table: str,
        key: object,
        *,
        from_: Time | None = None,
        to: Time | None = None,
        order: str = "asc",
        page_size: int | None = None,
    ) -> list[dict[str, Any]]:
        """The key's windows {"start", "end", "value"} that start in [`from_`, `to`] (epoch
        ms, datetimes, ISO-8601 or relative text such as "-15m"), in start order
        (`order="desc"`: the newest first), every page of them."""
        text = key_text(key)
        params = page_query(from_, to, order, page_size)
        path = f"/v1/tables/{quote(table, safe='')}/keys/{quote(text, safe='')}/windows"
        return list(
            paged(lambda q: self._request_routed("GET", path, table, text, params=q), params)
        )

    def window_range(
        self,
        table: str,
        *,
        from_: Time | None = None,
        to: Time | None = None,
        key_from: object | None = None,
        key_to: object | None = None,
        prefix: str | None = None,
        order: str = "asc",
        page_size: int = 500,
    ) -> Iterator[dict[str, Any]]:
        """The windows {"key", "start", "end", "value"} that start in [`from_`, `to`] of the
        keys in [`key_from`, `key_to`] (or with `prefix`), in key order, then start
        (`order="desc"`: reversed), following cursors page by page."""
        params = page_query(
            from_, to, order, page_size, key_from=key_from, key_to=key_to, prefix=prefix
        )
        path = f"/v1/tables/{quote(table, safe='')}/windows"
        plan = partial(self._owner_plan, self._holder_of_most(table), ())
        return paged(lambda q: self._send("GET", path, plan, params=q, table=table), params)

    def watch(self, table: str, key: object, *, idle_s: float = 60.0) -> Iterator[dict[str, Any]]:
        """The key's answer now (as `get_entry`, `value` None when absent), then one per
        change, for as long as the caller iterates. A stream that ends or breaks (its node
        gone, nothing heard for `idle_s`) is resumed with `Last-Event-ID` on the key's
        active, else any node, so no change is missed and none comes twice."""
        text = key_text(key)
        path = f"/v1/tables/{quote(table, safe='')}/keys/{quote(text, safe='')}/watch"
        # The active first; any node relays from a standby.
        return self._follow(
            lambda: self._owner_plan(self._replicas(table, text)[0], ()), path, {}, idle_s
        )

    def changes(
        self,
        table: str,
        prefix: str | None = None,
        from_: object | None = None,
        to: object | None = None,
        idle_s: float = 60.0,
    ) -> Iterator[dict[str, Any]]:
        """Every change of a key in the range (`prefix`, or `from_`..`to` inclusive; none:
        the whole table) from now on, from all partitions, in order within each, as dicts
        like `get_entry`'s (`value` None for a delete; `start`/`end` on a windowed table),
        for as long as the caller iterates; resumed as `watch` is."""
        bounds = (("prefix", prefix), ("from", from_), ("to", to))
        params = {name: key_text(v) for name, v in bounds if v is not None}
        path = f"/v1/tables/{quote(table, safe='')}/changes"
        return self._follow(
            lambda: self._owner_plan(self._holder_of_most(table), ()), path, params, idle_s
        )

    def _follow(
        self,
        plan: Callable[[], list[tuple[str, bool]]],
        path: str,
        params: dict[str, str],
        idle_s: float,
    ) -> Iterator[dict[str, Any]]:
        timeout = httpx.Timeout(self._timeout_s, read=idle_s)
        refresh = self._refresh_soon
        return follow(
            self._http,
            plan,
            path,
            params,
            timeout,
            _RETRYABLE,
            _error_of,
            refresh,
            wait_for_unreachable=self._wait_for_unreachable,
        )

    def owner(self, table: str, key: object) -> dict[str, Any]:
        """The nodes that hold the key's partition, as the key's active node's map has them:
        {"table", "key", "partition", "active", "standbys"} (`active` None while nobody is
        assigned). Reads no store."""
        text = key_text(key)
        path = f"/v1/tables/{quote(table, safe='')}/keys/{quote(text, safe='')}/owner"
        answer = self._request_routed("GET", path, table, text, reads=False)
        assert answer is not None
        return answer

    def refresh(self) -> None:
        """Fetch the partition map again from any reachable node."""
        last: Exception | None = None
        for url in self._candidates():
            try:
                resp = self._http.get(f"{url}/v1/metadata")
            except httpx.HTTPError as exc:
                last = exc
                continue
            if resp.status_code == 200:
                self._routes = parse_routes(resp.json(), self._seeds)
                return
            last = ClientError(f"{url} answered {resp.status_code} to /v1/metadata")
        raise ClientError(f"no node answered /v1/metadata (tried {self._candidates()}): {last}")

    def close(self) -> None:
        """Close the client's connections (leaving a `with Client(...)` block does it)."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ---- routing --------------------------------------------------------------------

    def _replicas(self, table: str, key_text: str) -> tuple[str | None, list[str]]:
        """The active's URL (None if unknown) and the standbys' URLs of a key's partition."""
        partition = self._partition_of(table, key_text)
        if partition is None:
            return None, []
        tp = (table, partition)
        return self._routes.active.get(tp), self._routes.standbys.get(tp, [])

    def _partition_of(self, table: str, key_text: str) -> int | None:
        """A key's partition, by the map's table definition (None: not known here)."""
        routes = self._fresh_routes()
        tdef = None if routes is None else routes.tables.get(table)
        if tdef is None or tdef.key_format is Format.AVRO:
            return None
        try:
            wire = key_codec(tdef).parse_text(key_text)
        except FormatError:
            return None  # let a node answer with the precise 400
        return tdef.partition_of(wire)  # None: placement unknown, any node asks all

    def _holder_of_most(self, table: str) -> str | None:
        """The node that is active for most of `table`'s partitions (fewest forwards)."""
        routes = self._fresh_routes()
        if routes is None:
            return None
        counts = Counter(url for (name, _), url in routes.active.items() if name == table)
        return counts.most_common(1)[0][0] if counts else None

    def _fresh_routes(self) -> Routes | None:
        """The partition map, fetched again once `refresh_interval_s` old (None: no node
        answered)."""
        if time.monotonic() - self._routes.fetched_at > self._refresh_interval_s:
            try:
                self.refresh()
            except ClientError:
                return None
        return self._routes

    def _candidates(self) -> list[str]:
        nodes = self._routes.nodes or self._seeds
        start = next(self._rr) % len(nodes)
        return nodes[start:] + nodes[:start]

    def _request_routed(
        self,
        method: str,
        path: str,
        table: str,
        key_text: str,
        *,
        params: dict[str, str] | None = None,
        absent_ok: bool = False,
        reads: bool = True,
    ) -> dict[str, Any] | None:
        def plan() -> list[tuple[str, bool]]:
            return self._owner_plan(*self._replicas(table, key_text))

        partition = self._partition_of(table, key_text)
        return self._send(
            method,
            path,
            plan,
            params=params,
            absent_ok=absent_ok,
            reads=reads,
            table=table,
            partitions=None if partition is None else (partition,),
        )

    def _owner_plan(self, active: str | None, standbys: Sequence[str]) -> list[tuple[str, bool]]:
        """The nodes to ask in turn: the active, the standbys (`max_lag`), then anyone."""
        first = [(active, False)] if active else []
        return dedupe(first + [(u, True) for u in standbys if u != active] + self._anyone())

    def _request_any(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        json_body: object | None = None,
    ) -> dict[str, Any]:
        answer = self._send(method, path, self._anyone, params=params, json_body=json_body)
        assert answer is not None
        return answer

    def _anyone(self) -> list[tuple[str, bool]]:
        return [(url, False) for url in self._candidates()]

    def _send(
        self,
        method: str,
        path: str,
        plan: Callable[[], list[tuple[str, bool]]],
        *,
        params: dict[str, str] | None = None,
        json_body: object | None = None,
        absent_ok: bool = False,
        reads: bool = True,
        table: str | None = None,
        partitions: Sequence[int] | None = None,
    ) -> dict[str, Any] | None:
        """Ask the nodes of `plan()` (URL, is a standby) in turn until one answers.

        A standby is asked with `max_lag` (the caller's, else `standby_max_lag`) so it
        answers from its own replica (not when `reads` is False: no replica is read).
        Refused or broken connections, timeouts and 429/502/503/504/508 move on to the next
        node; after a round the map is refreshed (at most once a second) and the round
        starts again after a short pause, until the budget is spent. A read of `table`
        carries the table's token (of `partitions`, when known) and keeps its answer's.
        """
        query = dict(params or {})
        standby_query = dict(query)
        tokens = self._tokens if reads and table is not None else None
        if reads:  # a read of a replica: how far behind the changelog it may be
            if tokens is not None and table is not None:
                after = tokens.token(table, partitions)
                if after:
                    query["after"] = after
            if self._max_lag is not None:
                query["max_lag"] = str(self._max_lag)
            standby_query = dict(query)
            standby_query.setdefault("max_lag", str(self._standby_max_lag))
        content = orjson.dumps(json_body) if json_body is not None else None
        headers = {"content-type": "application/json"} if content is not None else None
        deadline = time.monotonic() + self._budget_s
        last = "no node tried"
        order = plan()
        attempt = 0
        # Node -> why it took no connection; None once any node accepted one.
        unreached: dict[str, str] | None = {}
        while True:
            if attempt and attempt % len(order) == 0:
                if not self._wait_for_unreachable and unreached is not None:
                    raise nodes_unreachable(unreached)
                # A whole round failed: a fresher map, then a short pause before the next.
                self._refresh_soon()
                order = plan()
                attempt = 0
                time.sleep(min(0.1, max(deadline - time.monotonic(), 0.0)))
            url, is_standby = order[attempt % len(order)]
            attempt += 1
            remaining = deadline - time.monotonic()
            try:
                resp = self._http.request(
                    method,
                    url + path,
                    params=standby_query if is_standby else query,
                    content=content,
                    headers=headers,
                    timeout=max(min(self._timeout_s, remaining), 0.05),
                )
            except NOT_ACCEPTED as exc:
                last = f"{url}: {exc.__class__.__name__} {exc}"
                if unreached is not None:
                    unreached[url] = why_not_accepted(exc)
            except httpx.HTTPError as exc:
                last = f"{url}: {exc.__class__.__name__} {exc}"
                unreached = None
            else:
                unreached = None
                if resp.status_code == 200:
                    answer: dict[str, Any] = resp.json()
                    if tokens is not None and table is not None:
                        with contextlib.suppress(BadPositions, TypeError):
                            tokens.observe(table, answer.get("token") or "")
                    return answer
                error = _error_of(resp)
                if resp.status_code == 404 and absent_ok and error[0] == ErrorCode.NOT_FOUND:
                    return None
                if resp.status_code not in _RETRYABLE:
                    raise ClientError(f"{resp.status_code} {error[0]}: {error[1]}")
                last = f"{url}: {resp.status_code} {error[1]}"
            if time.monotonic() >= deadline:
                raise ClientError(
                    f"no answer within {self._budget_s:.1f}s for {method} {path}; last: {last}"
                )

    def _refresh_soon(self) -> None:
        """Refresh the map unless that was done less than a second ago."""
        now = time.monotonic()
        if now - self._refreshed_at < 1.0:
            return
        self._refreshed_at = now
        with contextlib.suppress(ClientError):
            self.refresh()


def checked_node_url(url: str) -> str:
    """`url` without a trailing slash; BadNodeUrl unless it is http(s)://HOST[:PORT]."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 -- raises ValueError for a port that is not 0-65535
    except ValueError:
        valid = False
    else:
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
    if not valid:
        example = f"http://{url}" if "://" not in url else "http://127.0.0.1:8100"
        raise BadNodeUrl(
            f"node URL {url!r} is not http(s)://HOST[:PORT]; write e.g. {example.rstrip('/')}"
        )
    return url.rstrip("/")


def _error_of(resp: httpx.Response) -> tuple[str, str]:
    try:
        err = resp.json()["error"]
        return str(err["code"]), str(err["message"])
    except (ValueError, KeyError, TypeError):
        # Not the error shape (a proxy's answer, say): no `ErrorCode`, a label of the client's.
        return "http_error", resp.text[:200]
