"""What the read paths (key path, read loop, fan-out, gather) use of the node's API.

`HttpApi` builds these parts and hands itself to the modules that answer reads; they see it
through this protocol, so none of them imports the API module (which imports them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sparkiq.core.queries import Failure
from sparkiq.core.topology import TopicPartition
from sparkiq.http.forward import Forwarder, Unreachable
from sparkiq.http.locate import Call, LocalReplica, Locator
from sparkiq.http.metrics import HttpMetrics
from sparkiq.http.params import Params
from sparkiq.http.responses import Answer, Response
from sparkiq.http.settings import HttpSettings
from sparkiq.http.view import NodeView


class Headers(Protocol):
    """Request headers by lower-case name (a dict, or any mapping with `get`)."""

    def get(self, key: str, default: None = None, /) -> str | None: ...


class ApiParts(Protocol):
    """The node's view, settings, metrics, locator and forwarder, and the read loop."""

    view: NodeView
    settings: HttpSettings
    metrics: HttpMetrics
    locator: Locator
    forwarder: Forwarder

    def unknown_table(self, name: str) -> Failure:
        """404 for a table this node does not know (503 while it has not read the catalog)."""
        ...

    def call_for(self, headers: Headers, params: Params, target: str) -> Call | Failure:
        """The `Call` of a request: hops and budget from its headers, lag bounds from `params`."""
        ...

    def read_raised(self, method: str, path: str, exc: Exception) -> bool:
        """Whether a read that raised `exc` is to be answered once more (`HttpApi`)."""
        ...

    def error_answer(self, method: str, path: str, exc: Exception) -> Answer:
        """The answer to an exception that escaped answering `method path`."""
        ...

    async def answer_from_replica(
        self,
        tp: TopicPartition,
        call: Call,
        read: Callable[[LocalReplica], Answer],
        found: str | Failure | None = None,
        asked: Response | Unreachable | None = None,
    ) -> Answer:
        """A single-partition GET: a local replica read, or the owner's answer as it is."""
        ...
