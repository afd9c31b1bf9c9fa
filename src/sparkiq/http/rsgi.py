"""RSGI adapter: serves `HttpApi` through granian's native Rust interface.

Caveat (why ASGI is the default): granian hands RSGI apps the path already percent-decoded,
so a key holding "/" (sent as %2F) cannot be told apart from a path separator. The adapter
re-encodes the decoded path, which keeps "%" and every other character exact; keys with "/"
are only reachable through the ASGI adapter. Requests pass the same gate as there
(`sparkiq.http.guard`); forwarded ones are signed over the re-encoded path, which the next
RSGI node re-encodes the same way.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from sparkiq.auth.apikeys import API_KEY_HEADER
from sparkiq.auth.cluster import CLUSTER_HEADER
from sparkiq.http.api import HttpApi
from sparkiq.http.requestid import REQUEST_ID, REQUEST_ID_HEADER
from sparkiq.http.responses import Response
from sparkiq.http.settings import BUDGET_HEADER, HOPS_HEADER


class RsgiApp:
    """`HttpApi` as an RSGI application (granian `Interfaces.RSGI`)."""

    def __init__(self, api: HttpApi) -> None:
        self.api = api
        self._keys = api.keys
        self._gate = api.gate

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        if scope.proto != "http":
            return
        method: str = scope.method
        path: str = scope.path
        if "%" in path or not path.isascii():
            path = quote(path, safe="/")
        query: str = scope.query_string
        headers = scope.headers
        hops = headers.get(HOPS_HEADER)
        gate = self._gate
        admitted = gate.admit(
            method,
            path,
            f"{path}?{query}" if query else path,
            authorization=headers.get("authorization"),
            api_key=headers.get(API_KEY_HEADER),
            request_id=headers.get(REQUEST_ID_HEADER),
            hops=hops,
            signature=headers.get(CLUSTER_HEADER),
        )
        if isinstance(admitted, Response):
            _send(proto, admitted)
            return
        gate.in_flight += 1
        try:
            response = None
            if method == "GET" and not query:
                # The hot path first (see `sparkiq.http.keypath`); None = not a case it answers.
                response = await self._keys.answer(
                    path.encode("ascii"), hops, headers.get(BUDGET_HEADER), admitted
                )
            if response is None:
                body: bytes | None = b""
                if method == "POST":
                    body = await _read_body(proto, headers, self.api.settings.max_body_bytes)
                if body is None:
                    response = self.api.body_too_large()
                else:
                    response = await self.api.handle(method, path, query, headers, body, admitted)
        finally:
            gate.in_flight -= 1
        _send(proto, response)


def _send(proto: Any, response: Response) -> None:
    headers = [*response.headers, (REQUEST_ID_HEADER, REQUEST_ID.get() or "")]
    proto.response_bytes(response.status, headers, response.body)


async def _read_body(proto: Any, headers: Any, limit: int) -> bytes | None:
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in proto:
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return None
    return b"".join(chunks)
