"""The gate every request passes before it is answered: id, load, caller, cluster headers.

`Gate.admit` runs once per request, in the adapter, before the key path or the generic
dispatch see it:

1. the request id: the caller's `x-request-id` if well formed, else a new one; it is set in
   `REQUEST_ID` for the logs and repeated on any forward;
2. the concurrency limit: past `max_in_flight` requests in flight the answer is 429 with
   Retry-After (health, readiness and metrics are never refused for load);
3. the internal forwarding headers (hops, budget) are honoured only on a request signed with
   the cluster credential, when the node has one: otherwise 403, so no one outside the
   cluster can pose as a forwarding node;
4. the cluster map a group leader serves (`mapexchange`): only to a request signed with the
   cluster credential when the node has one (403 otherwise), without a caller's credentials;
5. the caller's credentials: an `Identity`, or 401 with `WWW-Authenticate: Bearer` (not for
   the console's page and files, `/ui`, which hold no data: the page asks the API with the
   caller's own credentials). The credentials are kept in `FORWARD_HEADERS` so a forwarded
   request carries the caller's own identity to the owner, which checks it again: a caller
   can never read through another node what it could not read there directly.

Authorization (may this identity read this table?) happens where the table is known: the
key path declines a table the identity may not read, and the generic path answers 403.
"""

from __future__ import annotations

from sparkiq.auth import EVERYONE, AuthConfig, Authenticator, Identity
from sparkiq.auth.apikeys import API_KEY_HEADER
from sparkiq.http.app.mapexchange import is_map_path
from sparkiq.http.console.pages import is_console_path
from sparkiq.http.messages.errorcodes import ErrorCode
from sparkiq.http.messages.requestid import REQUEST_ID, accept_request_id, new_request_id
from sparkiq.http.messages.responses import JSON_HEADERS, Outcome, Response, error_response
from sparkiq.http.messages.wire import FORWARD_HEADERS
from sparkiq.http.metrics import HttpMetrics
from sparkiq.http.settings import HttpSettings

# Paths answered about the node itself: open unless the node protects them, never refused
# for load.
OPS_PATHS = frozenset(("/healthz", "/readyz", "/metrics", "/v1/openapi.json"))

_CHALLENGE = (*JSON_HEADERS, ("www-authenticate", 'Bearer realm="sparkiq"'))


class Gate:
    """Admits requests to one node's API."""

    def __init__(self, auth: AuthConfig, settings: HttpSettings, metrics: HttpMetrics) -> None:
        self._observe = metrics.observe
        self.authenticator = Authenticator(auth)
        self.cluster = auth.cluster
        self.protect_ops = auth.protect_ops
        self.max_in_flight = settings.max_in_flight
        self.in_flight = 0
        self._busy = error_response(
            429,
            ErrorCode.OVERLOADED,
            f"this node is answering {settings.max_in_flight} requests already; retry shortly",
            (*JSON_HEADERS, ("retry-after", str(settings.retry_after_s))),
        )

    def admit(
        self,
        method: str,
        path: str,
        target: str,
        *,
        authorization: str | None,
        api_key: str | None,
        request_id: str | None,
        hops: str | None,
        signature: str | None,
    ) -> Identity | Response:
        """The caller of this request, or the refusal to send instead of an answer.

        `target` is the raw path and query as received (what a forwarding node signed).
        The caller counts the request in flight (`in_flight`) while it answers it.
        """
        rid = accept_request_id(request_id)
        REQUEST_ID.set(rid)
        ops = path in OPS_PATHS
        if not ops and self.in_flight >= self.max_in_flight:
            return self._refuse(self._busy)
        if (
            hops is not None
            and self.cluster is not None
            and not self.cluster.verify(signature, method, target, hops)
        ):
            return self._refuse(
                error_response(
                    403,
                    ErrorCode.NOT_A_CLUSTER_NODE,
                    "forwarding headers are accepted only from nodes of this cluster "
                    "(the cluster signature is missing or wrong)",
                )
            )
        if (ops and not self.protect_ops) or is_console_path(path):
            return _OPS
        if is_map_path(path):
            # The cluster map a group leader serves its members (`mapexchange`): for nodes
            # of the cluster only, by their signature (checked above), not a caller's token.
            if self.cluster is not None and hops is None:
                return self._refuse(
                    error_response(
                        403,
                        ErrorCode.NOT_A_CLUSTER_NODE,
                        "the cluster map is served only to nodes of this cluster (requests "
                        "signed with the cluster secret)",
                    )
                )
            return _OPS
        found = self.authenticator.authenticate(authorization, api_key)
        if isinstance(found, str):
            return self._refuse(error_response(401, ErrorCode.UNAUTHENTICATED, found, _CHALLENGE))
        # The caller's credentials go with any forward, checked or not here (a node without
        # authentication still must not open an owner that has it).
        if api_key is not None and _single_line(api_key):
            lines = f"{API_KEY_HEADER}: {api_key}\r\n"
        elif authorization is not None and _single_line(authorization):
            lines = f"authorization: {authorization}\r\n"
        else:
            lines = ""
        # Setting a context variable costs several times reading one, and most requests
        # carry the same credentials (none) as the one before.
        if FORWARD_HEADERS.get() != lines:
            FORWARD_HEADERS.set(lines)
        return found

    def admit_plain(
        self, path: str, hops: str | None = None, request_id: str | None = None
    ) -> Identity | Response:
        """`admit` for a GET of `path` (no query) without credentials or a cluster signature:
        the loop server's plain lane (no `hops`, no `request_id`) and its node lane (a forward
        from another node: the hop count and the request id it carries).

        On a node without authentication the request is let in as everyone, under the id it
        carries if well formed, else a new one; unless the node is at its limit, `path` is
        one of `OPS_PATHS`, or it is a forward to a node that checks cluster signatures:
        `admit` decides those, as it does everything on a node with authentication. Same
        answers as `admit`, at a fraction of the cost.
        """
        if (
            self.authenticator.enabled
            or self.in_flight >= self.max_in_flight
            or path in OPS_PATHS
            or (hops is not None and self.cluster is not None)
            or (self.cluster is not None and is_map_path(path))
        ):
            return self.admit(
                "GET",
                path,
                path,
                authorization=None,
                api_key=None,
                request_id=request_id,
                hops=hops,
                signature=None,
            )
        REQUEST_ID.set(new_request_id() if request_id is None else accept_request_id(request_id))
        if FORWARD_HEADERS.get():
            FORWARD_HEADERS.set("")
        return EVERYONE

    def _refuse(self, response: Response) -> Response:
        """Count a refusal here: no endpoint answers it."""
        self._observe("refused", Outcome.ERROR, response.status, 0.0)
        return response


def _single_line(value: str) -> bool:
    return "\r" not in value and "\n" not in value


# Who asks for a node's own open endpoints (health, metrics): no table is readable.
_OPS = Identity("ops", frozenset(), "none")
