"""`GET /v1/metadata`: this node's view of the cluster and, with `peers=true`, the other
nodes' own replicas as they are now.

A node knows the current lag of its own replicas only (`local`); the lags in its map
(`partitions[].lags`, `nodes[].lags`) are what the other nodes reported when they last
joined the group, and a node that held nothing then reported nothing. `peers=true` asks
every other node that holds a replica of a table here (an active or a standby in this node's
placements), all at once, for its own `/v1/metadata`, and adds what each said of its own
replicas: `"peers": {url: {"local": [...], "error": null}}`. A peer that does not answer
within `active_timeout_s` (1 s), or answers anything but its metadata, is listed with `error`
and no replicas; it never fails the answer.

Authorization is `/v1/metadata`'s own: the gate admitted the caller before this runs, and
the requests to the peers are forwards like any other (`Forwarder`): signed with the cluster
credential and carrying the caller's own credentials, which each peer checks again, so a
caller learns nothing through this node that a peer would not tell it directly. A request
that another node sent (it carries a hop count) is never fanned out again: `peers=true` on
one is refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import orjson

from sparkiq.core.queries import Failure, FailureReason
from sparkiq.http.forwarder import Forwarder, Unreachable
from sparkiq.http.messages.params import parse_query
from sparkiq.http.messages.responses import Response, failure_response, json_response
from sparkiq.http.nodeview import NodeView

PEERS_PARAM = "peers"
PARAMS = frozenset((PEERS_PARAM,))
_PATH = "/v1/metadata"

# What one peer said of its own replicas: {"local": [...], "error": None | str}.
PeerReplicas = dict[str, object]


async def answer(
    view: NodeView, forwarder: Forwarder, budget_s: float, query: str, *, forwarded: bool
) -> Response:
    """The answer to `GET /v1/metadata?{query}`; `budget_s`: how long the slowest peer is
    waited for; `forwarded`: another node sent the request."""
    params = parse_query(query, PARAMS)
    if isinstance(params, Failure):
        return failure_response(params)
    wants_peers = _bool(params.get(PEERS_PARAM))
    if wants_peers is None:
        return failure_response(
            Failure(FailureReason.BAD_REQUEST, f"{PEERS_PARAM} takes true or false")
        )
    if wants_peers and forwarded:
        return failure_response(
            Failure(
                FailureReason.BAD_REQUEST,
                f"{PEERS_PARAM}=true is for clients: a node asks each peer for its own "
                f"{_PATH}, never for its peers' again",
            )
        )
    meta = view.metadata()
    if not wants_peers:
        return json_response(meta)
    return json_response({**meta, "peers": await gather(view, forwarder, budget_s)})


def peer_urls(view: NodeView) -> list[str]:
    """The other nodes that hold a replica (active or standby) of a table, by this node's
    placements: the ones that have a lag to tell."""
    urls: set[str] = set()
    for table in view.tables():
        for p in range(table.partitions):
            placement = view.placement((table.topic, p))
            if placement.active is not None:
                urls.add(placement.active)
            urls.update(placement.standbys)
    urls.discard(view.url)
    return sorted(urls)


async def gather(view: NodeView, forwarder: Forwarder, budget_s: float) -> dict[str, PeerReplicas]:
    """Every peer's own replicas (`peer_urls`), asked in parallel within `budget_s`."""
    urls = peer_urls(view)
    answers = await asyncio.gather(*(ask(forwarder, url, budget_s) for url in urls))
    return dict(zip(urls, answers, strict=True))


async def ask(forwarder: Forwarder, url: str, budget_s: float) -> PeerReplicas:
    """What the node at `url` says of its own replicas, or why it says nothing."""
    # hops=1: the peer sees a forwarded request, checks its cluster signature, and would
    # refuse to fan it out again.
    got = await forwarder.send(url, "GET", _PATH, None, hops=1, budget_s=budget_s)
    if isinstance(got, Unreachable):
        return _failed(got.message)
    doc = _json(got.body)
    if got.status != 200:
        return _failed(f"answered {got.status}: {_error_message(doc)}")
    local = doc.get("local") if isinstance(doc, Mapping) else None
    if not isinstance(local, list):
        return _failed("answered without a list of its replicas (`local`)")
    return {"local": local, "error": None}


def _failed(error: str) -> PeerReplicas:
    return {"local": [], "error": error}


def _bool(raw: str | None) -> bool | None:
    """`true`/`false` (not given: false); None for anything else, the empty text included
    (the OpenAPI document says the parameter is a boolean)."""
    if raw is None:
        return False
    return {"false": False, "true": True}.get(raw)


def _json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def _error_message(doc: Any) -> str:
    """The message of an answer in the one error shape (or a note that it was not one)."""
    error = doc.get("error") if isinstance(doc, Mapping) else None
    message = error.get("message") if isinstance(error, Mapping) else None
    return str(message) if message else "an answer that is not sparkiq's error shape"
