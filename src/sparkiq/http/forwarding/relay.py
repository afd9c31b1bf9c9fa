"""Another node's event stream, read for a watch relayed through this node.

A watch of a key this node holds no replica of is relayed: this node asks the node that has
one (`GET .../watch` with the hops header, the caller's credentials and the cluster
signature, as forwards carry: `sparkiq.http.messages.wire.forward_request`) and reads its chunked
`text/event-stream` answer as it comes. One connection per relayed watch, closed with it.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncGenerator
from urllib.parse import urlsplit

from sparkiq.auth.cluster import ClusterCredential
from sparkiq.http.forwarding.poolconnection import _Broken, node_address, parse_head
from sparkiq.http.messages.wire import forward_request


class UpstreamError(Exception):
    """The other node could not be reached, or broke the stream off."""


class Refused(Exception):
    """The other node answered the watch with an error status (not a stream)."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"answered {status}")
        self.status = status
        self.body = body


class Upstream:
    """Opens event streams on other nodes (the node's cluster credential and TLS context)."""

    def __init__(
        self, cluster: ClusterCredential | None = None, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self._cluster = cluster
        self._ssl = ssl_context

    async def stream(
        self,
        base_url: str,
        target: str,
        *,
        hops: int,
        budget_s: float,
        extra: str,
        last_event_id: str | None,
        connect_timeout_s: float,
        idle_timeout_s: float,
    ) -> AsyncGenerator[bytes]:
        """The body of `GET target` on `base_url`, chunk by chunk, until the other node ends
        it. `extra`: header lines to repeat (the caller's credentials). Raises `Refused` for
        an answer that is not a 200 stream, `UpstreamError` when it cannot be had, breaks, or
        sends nothing for `idle_timeout_s` (its heartbeats stopped: the node or the path to
        it is gone)."""
        try:
            host, port, tls = node_address(base_url, self._ssl)
        except ValueError as exc:
            raise UpstreamError(str(exc)) from exc
        if last_event_id is not None:
            extra += f"last-event-id: {last_event_id}\r\n"
        signature = None if self._cluster is None else self._cluster.sign("GET", target, hops + 1)
        request = forward_request(
            "GET",
            target,
            urlsplit(base_url).netloc,
            hops + 1,
            max(int(budget_s * 1000), 1),
            extra,
            None,
            signature,
            None,
        )
        try:
            async with asyncio.timeout(connect_timeout_s):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=tls, server_hostname=host if tls else None
                )
        except (OSError, TimeoutError) as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from exc
        try:
            writer.write(request)
            async with asyncio.timeout(connect_timeout_s):
                head = await reader.readuntil(b"\r\n\r\n")
                status, _, length, chunked, _ = parse_head(head[:-4])
                if status != 200:
                    raise Refused(status, await reader.readexactly(length or 0))
            if not chunked:
                raise UpstreamError(f"{base_url} did not answer with a chunked stream")
            while True:
                async with asyncio.timeout(idle_timeout_s):
                    size_line = await reader.readline()
                    if not size_line.endswith(b"\n"):
                        raise UpstreamError(f"{base_url} ended the stream mid-chunk")
                    size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        return
                    chunk = await reader.readexactly(size + 2)
                yield chunk[:-2]
        except (
            OSError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ValueError,
            _Broken,
        ) as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from exc
        except TimeoutError as exc:
            raise UpstreamError(f"{base_url} sent nothing in time") from exc
        finally:
            writer.close()
