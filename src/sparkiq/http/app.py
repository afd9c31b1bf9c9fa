"""The node's side of the server seam (`sparkiq.http.interface.App`): admit, route, answer.

`NodeApp` takes a request as the server framed it and answers it now or later: the gate
admits it (request id, load, caller, cluster signature; `sparkiq.http.guard`), a GET without
a query goes to the key path (`sparkiq.http.keypath`, which answers single-key lookups
without the generic dispatch), and everything the key path declines to `HttpApi.handle`.
A request answered later (a forward, a wait, the generic dispatch) is a `Deferred`, which
counts it in flight (the gate's load limit) from the moment the server starts it until its
answer is given or its connection closes. Body limits are decided here too: the server stops
reading past `max_body_bytes`, and the 413 is this module's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping

from sparkiq.auth.apikeys import API_KEY_HEADER
from sparkiq.auth.cluster import CLUSTER_HEADER
from sparkiq.http.api import HttpApi
from sparkiq.http.errorcodes import ErrorCode
from sparkiq.http.interface import Answer, Response
from sparkiq.http.keyread import Pending
from sparkiq.http.requestid import REQUEST_ID, REQUEST_ID_HEADER
from sparkiq.http.responses import error_response
from sparkiq.http.wire import BUDGET_HEADER, HOPS_HEADER

log = logging.getLogger(__name__)

_HOPS = HOPS_HEADER.encode()
_BUDGET = BUDGET_HEADER.encode()
_API_KEY = API_KEY_HEADER.encode()
_CLUSTER = CLUSTER_HEADER.encode()
_REQUEST_ID = REQUEST_ID_HEADER.encode()

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
    )

    def __init__(self, api: HttpApi) -> None:
        self.api = api
        self.gate = api.gate
        self.keys = api.keys
        self.max_body_bytes = api.settings.max_body_bytes
        self._admit = api.gate.admit
        self._admit_plain = api.gate.admit_plain
        self._answer_now = api.keys.answer_now
        self.forward_now = api.keys.forward_now

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
                return Deferred(self, found) if isinstance(found, Pending) else found
        text_headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers.items()}
        work = self.api.handle(
            method,
            path.decode("latin-1"),
            query.decode("latin-1"),
            text_headers,
            body,
            admitted,
        )
        return Deferred(self, None, work)

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
            headers = {}
            if hops is not None:
                headers[HOPS_HEADER] = hops.decode("latin-1")
            if budget is not None:
                headers[BUDGET_HEADER] = budget.decode("latin-1")
            work = self.api.handle("GET", text, "", headers, b"", admitted)
            return Deferred(self, None, work)
        return Deferred(self, found) if isinstance(found, Pending) else found

    def refusal(self, status: int, message: str) -> Response:
        return error_response(status, _REFUSAL_CODES.get(status, ErrorCode.BAD_REQUEST), message)


class Deferred:
    """An answer that comes later (`interface.Later`): a key read left pending by the key
    path (asked of the owner with callbacks, without a task, when a pooled connection is
    free: `KeyPath.forward_now`), or a coroutine run as a task. In flight from `then` until
    it has answered, or its task has ended."""

    __slots__ = ("_app", "_cancelled", "_done", "_pending", "_task", "_work")

    def __init__(
        self,
        app: NodeApp,
        pending: Pending | None,
        work: Coroutine[object, object, Response] | None = None,
    ) -> None:
        self._app = app
        self._pending = pending
        self._work = work
        self._task: asyncio.Task[Response] | None = None
        self._done: Callable[[Response], None] | None = None
        self._cancelled = False

    def then(self, done: Callable[[Response], None]) -> None:
        self._done = done
        app = self._app
        app.gate.in_flight += 1
        pending = self._pending
        if pending is None:
            assert self._work is not None
            work, self._work = self._work, None
            self._run(work)
        elif not app.forward_now(pending, self._replied, self._run):
            self._run(app.keys.finish(pending))

    def cancel(self) -> None:
        self._cancelled = True
        if self._task is not None:
            self._task.cancel()
        elif self._work is not None:  # never started
            self._work.close()
            self._work = None

    def _replied(self, response: Response) -> None:
        """The owner's answer to `forward_now`."""
        self._app.gate.in_flight -= 1
        if not self._cancelled and self._done is not None:
            self._done(response)

    def _run(self, work: Coroutine[object, object, Response]) -> None:
        """Answer in a task (which copies the context: the request id the gate set)."""
        if self._cancelled:
            self._app.gate.in_flight -= 1
            work.close()
            return
        task = asyncio.get_running_loop().create_task(work)
        self._task = task
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Response]) -> None:
        self._app.gate.in_flight -= 1
        if task.cancelled() or self._cancelled or self._done is None:
            return
        exc = task.exception()
        if exc is None:
            self._done(task.result())
        else:  # the API answers its own errors; this is a last resort
            log.error("unexpected error answering a request", exc_info=exc)
            message = "internal error; the node logged the details"
            self._done(self._app.refusal(500, message))
