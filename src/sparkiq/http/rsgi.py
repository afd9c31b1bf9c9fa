"""RSGI adapter: serves `HttpApi` through granian's native Rust interface.

Caveat (why ASGI is the default): granian hands RSGI apps the path already percent-decoded,
so a key holding "/" (sent as %2F) cannot be told apart from a path separator. The adapter
re-encodes the decoded path, which keeps "%" and every other character exact; keys with "/"
are only reachable through the ASGI adapter.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from sparkiq.http.api import HttpApi
from sparkiq.http.settings import BUDGET_HEADER, HOPS_HEADER


class RsgiApp:
    """`HttpApi` as an RSGI application (granian `Interfaces.RSGI`)."""

    def __init__(self, api: HttpApi) -> None:
        self.api = api
        self._keys = api.keys

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        if scope.proto != "http":
            return
        method: str = scope.method
        path: str = scope.path
        if "%" in path or not path.isascii():
            path = quote(path, safe="/")
        if method == "GET" and not scope.query_string:
            # The hot path first (see `sparkiq.http.keypath`); None = not a case it answers.
            headers = scope.headers
            answer = await self._keys.answer(
                path.encode("ascii"), headers.get(HOPS_HEADER), headers.get(BUDGET_HEADER)
            )
            if answer is not None:
                proto.response_bytes(answer.status, answer.headers, answer.body)
                return
        body: bytes | None = b""
        if method == "POST":
            body = await _read_body(proto, scope.headers, self.api.settings.max_body_bytes)
        if body is None:
            response = self.api.body_too_large()
        else:
            response = await self.api.handle(method, path, scope.query_string, scope.headers, body)
        # granian takes the headers as any sequence of pairs: the tuple as it is.
        proto.response_bytes(response.status, response.headers, response.body)


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
