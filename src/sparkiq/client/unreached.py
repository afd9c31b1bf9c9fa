"""Nodes that take no connection: what counts as that, and the error that names them.

A command-line call fails at once when no node it asks accepts a connection, rather than
trying again until its budget is spent (`Client(wait_for_unreachable=False)`, its event
streams, `sparkiq cluster`). A node that accepts and then fails or answers badly has been
reached: only refused, unresolvable and timed-out connections count here.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from sparkiq.core.errors import NodesUnreachable

# The httpx errors of a connection that was never made.
NOT_ACCEPTED = (httpx.ConnectError, httpx.ConnectTimeout)


def why_not_accepted(exc: httpx.HTTPError) -> str:
    """What a connection error says (its class name when it says nothing)."""
    return str(exc) or exc.__class__.__name__


def nodes_unreachable(why_by_url: Mapping[str, str]) -> NodesUnreachable:
    """The error naming each node asked and why it took no connection."""
    return NodesUnreachable(
        "no node accepted a connection: "
        + "; ".join(f"{url}: {why}" for url, why in why_by_url.items())
    )
