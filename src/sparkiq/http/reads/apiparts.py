"""What the read paths (key path, read loop, fan-out, gather) use of the node's API.

`HttpApi` builds these parts and hands itself to the modules that answer reads; they see it
through this protocol, so none of them imports the API module (which imports them).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from sparkiq.core.queries import Failure
from sparkiq.core.tables import TableDef
from sparkiq.http.forwarder import Forwarder
from sparkiq.http.messages.params import Params
from sparkiq.http.messages.responses import Answer
from sparkiq.http.metrics import HttpMetrics
from sparkiq.http.nodeview import NodeView
from sparkiq.http.reads.locate import Call, Locator
from sparkiq.http.settings import HttpSettings

# What a request to one table's endpoint carries: its table, key text ("" for table-wide
# endpoints), query parameters and `Call`.
TableRequest = tuple[TableDef, str, Params, Call]


class Headers(Protocol):
    """Request headers by lower-case name (a dict, or any mapping with `get`)."""

    def get(self, key: str, default: None = None, /) -> str | None: ...


class ApiParts(Protocol):
    """The node's view, settings, metrics, locator and forwarder, and what requests share."""

    view: NodeView
    settings: HttpSettings
    metrics: HttpMetrics
    locator: Locator
    forwarder: Forwarder

    def table_request(
        self,
        table_name: str,
        key_segment: str,
        path: str,
        query: str,
        headers: Headers,
        allowed: Collection[str],
    ) -> TableRequest | Failure:
        """The table, key text, parameters (of `allowed`) and `Call` of a request to one
        table's endpoint, or why it cannot be answered (`HttpApi.table_request`)."""
        ...

    def read_raised(self, method: str, path: str, exc: Exception) -> bool:
        """Whether a read that raised `exc` is to be answered once more (`HttpApi`)."""
        ...

    def error_answer(self, method: str, path: str, exc: Exception) -> Answer:
        """The answer to an exception that escaped answering `method path`."""
        ...
