"""Settings of the HTTP layer: request budget, hop limit, size limits, connection pool.

One frozen value, built by the node from its own settings. Every field is documented here
because it is also what an operator tunes.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkiq.errors import ConfigError

# Internal query parameter of a read forwarded to a standby after its active failed: answer
# from this node's own replica if it is at most this many offsets behind, else 503 at once.
# Accepted only together with the hops header (i.e. from another node).
FALLBACK_PARAM = "fallback_lag"

# Request headers that travel between nodes.
HOPS_HEADER = "x-sparkiq-hops"  # how many nodes forwarded this request so far
BUDGET_HEADER = "x-sparkiq-budget-ms"  # what is left of the first node's budget


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """How the HTTP layer waits, forwards and limits requests."""

    # How long one request may wait for a partition to get a ready owner (restoring, moving,
    # owner unreachable) before it is answered 503. A forwarded request carries what is left.
    budget_s: float = 5.0
    # Forwards one request may take; the node that would forward once more answers 508.
    hop_limit: int = 3
    # Largest key (in its wire form, and as path text) accepted; larger -> 413.
    max_key_bytes: int = 4096
    # Largest request body accepted (multi-get); larger -> 413.
    max_body_bytes: int = 1 << 20
    # Largest number of keys in one multi-get.
    max_multi_get_keys: int = 10_000
    # The Retry-After (seconds) sent with a 503.
    retry_after_s: int = 1
    # Pause before asking again an owner that refused the connection: the cluster map may
    # still name a node that died until the group notices, so do not spin on it.
    reconnect_pause_s: float = 0.05
    # A standby (or a promoted replica still restoring) may answer a read whose active cannot
    # (refused, timed out, restoring, 503) if it is at most this many offsets behind the
    # changelog end; a request's `max_lag=N` sets the bound instead.
    standby_max_lag: int = 10_000
    # How long one attempt waits for the active's answer before a standby is asked; the
    # active is asked again (within the budget) if no standby can answer.
    active_timeout_s: float = 1.0
    # Range pages: default and largest `limit`.
    default_range_limit: int = 100
    max_range_limit: int = 1000
    # Window queries: the most windows one answer may hold.
    max_windows: int = 10_000
    # Keep-alive connections kept per owner node for forwarding.
    pool_per_host: int = 64
    # Single-key reads forwarded in one loop iteration to one owner share a connection, up to
    # this many (HTTP/1.1 pipelining; see `sparkiq.http.pool`). 1: one per connection.
    pipeline_depth: int = 16
    # Requests one node answers at once (forwarded ones included); past it: 429 + Retry-After.
    max_in_flight: int = 512

    def __post_init__(self) -> None:
        if self.budget_s <= 0:
            raise ConfigError(f"budget_s must be > 0, got {self.budget_s}")
        if self.standby_max_lag < 0:
            raise ConfigError(f"standby_max_lag must be >= 0, got {self.standby_max_lag}")
        if self.active_timeout_s <= 0:
            raise ConfigError(f"active_timeout_s must be > 0, got {self.active_timeout_s}")
        if self.hop_limit < 1:
            raise ConfigError(f"hop_limit must be >= 1, got {self.hop_limit}")
        if self.max_key_bytes < 1 or self.max_body_bytes < 1:
            raise ConfigError("max_key_bytes and max_body_bytes must be >= 1")
        if not 1 <= self.default_range_limit <= self.max_range_limit:
            raise ConfigError("need 1 <= default_range_limit <= max_range_limit")
        if self.max_in_flight < 1:
            raise ConfigError(f"max_in_flight must be >= 1, got {self.max_in_flight}")
        if self.pool_per_host < 1:
            raise ConfigError(f"pool_per_host must be >= 1, got {self.pool_per_host}")
        if self.pipeline_depth < 1:
            raise ConfigError(f"pipeline_depth must be >= 1, got {self.pipeline_depth}")
