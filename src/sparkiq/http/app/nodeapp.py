"""The node's side of the server seam (`sparkiq.http.seam.App`): admit, route, answer.

`NodeApp` takes a request as the server framed it and answers it now or later: the gate
admits it (request id, load, caller, cluster signature; `sparkiq.http.app.gate`), a GET without
a query goes to the key path (`sparkiq.http.reads.keypath`, which answers single-key lookups
without the generic dispatch), a watch (of a key, or of a range: `.../changes`) to
`sparkiq.http.watches.endpoints` (a `Stream`), and everything else to `HttpApi.handle`.
A request answered later is a `sparkiq.http.deferred.Counted`: the key path's pending read
itself (a forward or a wait), or a `Deferred` coroutine (the generic dispatch); it counts
itself in flight (the gate's load limit) from when the server starts it until its answer is
given or its connection closes. Body limits are decided here too: the server stops
reading past `max_body_bytes`, and the 413 is this module's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from sparkiq.auth import Identity
from sparkiq.auth.apikeys import API_KEY_HEADER
from sparkiq.auth.cluster import CLUSTER_HEADER
from sparkiq.http.app.dispatch import HttpApi
from sparkiq.http.console.pages import Console, is_console_path
from sparkiq.http.deferred import Deferred
from sparkiq.http.messages.errorcodes import ErrorCode
from sparkiq.http.messages.requestid import REQUEST_ID, REQUEST_ID_HEADER
from sparkiq.http.messages.responses import Outcome, error_response
from sparkiq.http.messages.wire import BUDGET_HEADER, HOPS_HEADER, forwarded_headers
from sparkiq.http.reads.keyread import Pending
from sparkiq.http.seam import Answer, Response, Stream

log = logging.getLogger(__name__)

_HOPS = HOPS_HEADER.encode()
_BUDGET = BUDGET_HEADER.encode()
_API_KEY = API_KEY_HEADER.encode()
_CLUSTER = CLUSTER_HEADER.encode()
_REQUEST_ID = REQUEST_ID_HEADER.encode()
_IF_NONE_MATCH = b"if-none-match"
_CONSOLE = b"/ui"
_WATCH = b"/watch"
_CHANGES = b"/changes"

# The error code of each refusal the server makes itself (`NodeApp.refusal`).
_REFUSAL_CODES = {
    400: ErrorCode.BAD_REQUEST,
    408: ErrorCode.REQUEST_TIMEOUT,
    500: ErrorCode.INTERNAL,
    503: ErrorCode.TOO_MANY_CONNECTIONS,
}


class NodeApp:
    """`HttpApi` behind the server seam."""

    read_headers: tuple[str, ...] = (
        "authorization",
        API_KEY_HEADER,
        REQUEST_ID_HEADER,
        HOPS_HEADER,
        BUDGET_HEADER,
        CLUSTER_HEADER,
        "if-none-match",  # the console's files (`sparkiq.http.console.pages`)
    )

    def __init__(self, api: HttpApi, console: Console | None = None) -> None:
        self.api = api
        self.console = console if console is not None else Console()
        self.gate = api.gate
        self.keys = api.keys
        self.max_body_bytes = api.settings.max_body_bytes
        self._admit = api.gate.admit
        self._admit_plain = api.gate.admit_plain
        self._answer_now = api.keys.answer_now
        self.forward_now = api.keys.forward_now
        self.finish = api.keys.finish

    def answer(
        self, method: str, target: bytes, headers: Mapping[bytes, bytes], body: bytes | None
    ) -> Answer:
        if body is None:
            REQUEST_ID.set(None)  # refused before it was admitted: it has no id
            return self.api.body_too_large()
        # Header values are decoded only when present (most requests carry none of these).
        get = headers.get
        hops = get(_HOPS)
        authorization = get(b"authorization")
        api_key = get(_API_KEY)
        request_id = get(_REQUEST_ID)
        signature = get(_CLUSTER)
        path, _, query = target.partition(b"?")
        admitted = self._admit(
            method,
            path.decode("latin-1"),
            target.decode("latin-1"),
            authorization=None if authorization is None else authorization.decode("latin-1"),
            api_key=None if api_key is None else api_key.decode("latin-1"),
            request_id=None if request_id is None else request_id.decode("latin-1"),
            hops=None if hops is None else hops.decode("latin-1"),
            signature=None if signature is None else signature.decode("latin-1"),
        )
        if isinstance(admitted, Response):
            return admitted
        if method == "GET" and not query:
            found = self._answer_now(path, hops, get(_BUDGET), admitted)
            if found is not None:
                if isinstance(found, Pending):
                    found.app = self
                return found
        if path.startswith(_CONSOLE):
            text = path.decode("latin-1")
            if is_console_path(text):
                etag = get(_IF_NONE_MATCH)
                return self._console(method, text, query, etag)
        if method == "GET" and _is_watch(path):
            return self._watch(path, query, headers, admitted)
        return self._generic(method, path, query, headers, body, admitted)

    def answer_plain(
        self,
        target: bytes,
        hops: bytes | None = None,
        budget: bytes | None = None,
        request_id: bytes | None = None,
    ) -> Answer:
        text = target.decode("latin-1")
        if hops is None:
            admitted = self._admit_plain(text)
        else:
            rid = None if request_id is None else request_id.decode("latin-1")
            admitted = self._admit_plain(text, hops.decode("latin-1"), rid)
        if isinstance(admitted, Response):
            return admitted
        found = self._answer_now(target, hops, budget, admitted)
        if found is None:
            if target.startswith(_CONSOLE) and is_console_path(text):
                return self._console("GET", text, b"", None)
            headers = forwarded_headers(hops, budget, request_id)
            if _is_watch(target):
                return self._watch(target, b"", headers, admitted)
            return self._generic("GET", target, b"", headers, b"", admitted)
        if isinstance(found, Pending):
            found.app = self
        return found

    def _generic(
        self,
        method: str,
        path: bytes,
        query: bytes,
        headers: Mapping[bytes, bytes],
        body: bytes,
        identity: Identity,
    ) -> Deferred:
        """An admitted request the key path declined: `HttpApi.handle`, in a task."""
        text_headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers.items()}
        work = self.api.handle(
            method, path.decode("latin-1"), query.decode("latin-1"), text_headers, body, identity
        )
        return Deferred(self, work)

    def _watch(
        self, path: bytes, query: bytes, headers: Mapping[bytes, bytes], identity: Identity
    ) -> Response | Stream:
        """An admitted watch (`sparkiq.http.watches.endpoints`): an event stream, or why not."""
        text_headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers.items()}
        return self.api.watches.answer(
            path.decode("latin-1"), query.decode("latin-1"), text_headers, identity
        )

    def _console(
        self, method: str, path: str, query: bytes, if_none_match: bytes | None
    ) -> Response:
        """A request for the console's page or files (`sparkiq.http.console.pages`), counted in
        the metrics as the endpoint "console"."""
        response = self.console.answer(
            method,
            path,
            query.decode("latin-1"),
            None if if_none_match is None else if_none_match.decode("latin-1"),
        )
        self.api.metrics.observe("console", Outcome.LOCAL, response.status, 0.0)
        return response

    def refusal(self, status: int, message: str) -> Response:
        return error_response(status, _REFUSAL_CODES.get(status, ErrorCode.BAD_REQUEST), message)


def _is_watch(path: bytes) -> bool:
    """Whether `path` asks for a watch: of a key (`.../keys/{key}/watch`) or of a range
    (`/v1/tables/{table}/changes`)."""
    return path.endswith(_WATCH) or (path.endswith(_CHANGES) and path.count(b"/") == 4)
