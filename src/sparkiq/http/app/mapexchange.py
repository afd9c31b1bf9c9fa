"""The cluster map by reference over HTTP: `GET /v1/cluster-map/{digest}` and its client.

A group leader whose map is too big to travel in every member's assignment
(`sparkiq.core.mapref`) publishes the encoded map here and gives the members a reference;
each member asks the leader for it with this node's forwarding client (pooled keep-alive
connections), as a request from one node to another: signed with the cluster credential
when the cluster has one, like a forward. A node with a cluster credential answers only
such signed requests (403 otherwise; no caller's own credentials are needed or read); a node
without one, which has no authentication either, answers anyone, as it does `/v1/metadata`.

The last `KEPT_MAPS` maps are kept: a member that is slow to ask still finds the map it was
given while one or two newer generations come and go.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from sparkiq.core.mapref import MapReference
from sparkiq.http.forwarder import Forwarder, Unreachable
from sparkiq.http.messages.errorcodes import ErrorCode
from sparkiq.http.messages.responses import Response, error_response

log = logging.getLogger(__name__)

MAP_PATH = "/v1/cluster-map/"
KEPT_MAPS = 4
# How long one attempt to fetch a map may take; the member asks again after it.
FETCH_BUDGET_S = 5.0

_OCTETS = (("content-type", "application/octet-stream"),)


def is_map_path(path: str) -> bool:
    return path.startswith(MAP_PATH)


class HttpMapExchange:
    """One node's `MapExchange`: the maps it published as leader, and fetches of others'."""

    def __init__(self, forwarder: Forwarder, url: str) -> None:
        self._forwarder = forwarder
        self._url = url
        self._maps: OrderedDict[str, bytes] = OrderedDict()
        self.served = 0  # maps answered, for the benchmark and the tests

    @property
    def url(self) -> str:
        return self._url

    def publish(self, generation: int, digest: str, data: bytes) -> None:
        self._maps[digest] = data
        self._maps.move_to_end(digest)
        while len(self._maps) > KEPT_MAPS:
            self._maps.popitem(last=False)
        log.debug(
            "serving the map of generation %d (%d bytes) as %s", generation, len(data), digest
        )

    def digests(self) -> list[str]:
        """The digests of the maps kept, oldest first."""
        return list(self._maps)

    def answer(self, method: str, path: str) -> Response:
        """The answer to `method path`, a path under MAP_PATH (the gate admitted it)."""
        if method != "GET":
            return error_response(
                405, ErrorCode.METHOD_NOT_ALLOWED, f"{method} is not allowed here; use GET"
            )
        digest = path[len(MAP_PATH) :]
        data = self._maps.get(digest)
        if data is None:
            return error_response(
                404,
                ErrorCode.NO_ROUTE,
                f"this node keeps no cluster map {digest!r} (it keeps the last {KEPT_MAPS} it "
                "published as group leader); a newer assignment names the current one",
            )
        self.served += 1
        return Response(200, data, _OCTETS)

    async def fetch(self, reference: MapReference) -> bytes | None:
        # hops=0: the leader receives hop count 1, i.e. a request from another node, signed.
        got = await self._forwarder.send(
            reference.url,
            "GET",
            f"{MAP_PATH}{reference.digest}",
            None,
            hops=0,
            budget_s=FETCH_BUDGET_S,
        )
        if isinstance(got, Unreachable):
            log.info("cannot fetch the cluster map from %s yet: %s", reference.url, got.message)
            return None
        if got.status != 200:
            log.info(
                "%s answered %d to a fetch of the map of generation %d: %s",
                reference.url,
                got.status,
                reference.generation,
                got.body[:200].decode("utf-8", "replace"),
            )
            return None
        return got.body
