"""Settings of the HTTP layer: request budget, hop limit, size limits, connection pool,
connection limit and timeouts.

One frozen value, built by the node from its own settings. Every field is documented here
because it is also what an operator tunes.

The connection limit (`max_connections`) defaults to what the process's open-file limit
leaves once a reserve is kept for everything else the node opens (`default_max_connections`).
"""

from __future__ import annotations

import resource
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
    # Client connections held open at once (other nodes' forwarding connections included);
    # past it a new connection is answered 503 (`too_many_connections`, Retry-After) and
    # closed at once. None: `default_max_connections` of the open-file limit when the server
    # starts.
    max_connections: int | None = None
    # A connection that has sent nothing (no request begun) is closed after this long.
    header_timeout_s: float = 10.0
    # A keep-alive connection idle this long between requests is closed.
    idle_timeout_s: float = 75.0
    # A request whose head or body has not fully arrived this long after its first bytes is
    # answered 408 and its connection closed.
    request_timeout_s: float = 30.0

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
        if self.max_connections is not None and self.max_connections < 1:
            raise ConfigError(f"max_connections must be >= 1, got {self.max_connections}")
        for name in ("header_timeout_s", "idle_timeout_s", "request_timeout_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")


# -- the connection limit's default ---------------------------------------------------------

# Open files kept for everything but client connections: the Kafka clients' broker
# connections (catalog reader, restorer, offset probes, group member), RocksDB's table files
# (a store keeps every SST file it has open), the forwarding pool's connections to other
# nodes, logs. A quarter of the limit, and never less than this:
FD_RESERVE_MIN = 256
# A connection limit never set below this, however low the open-file limit (a node that
# cannot hold this many has to have its limit raised: ulimit -n, LimitNOFILE=).
MIN_CONNECTIONS = 128
# RLIM_INFINITY is taken as Linux's default ceiling on open files (fs.nr_open).
_UNLIMITED_FILES = 1 << 20


def default_max_connections(open_files: int, backlog: int = 1024) -> int:
    """The connection limit a node with an open-file limit of `open_files` (RLIMIT_NOFILE's
    soft limit; negative: unlimited) and a listen backlog of `backlog` takes by default.

    What the limit leaves after the reserve (`FD_RESERVE_MIN`, or a quarter of the limit if
    more) and the backlog: the event loop accepts every connection waiting in the listen
    queue in one turn, before any of them is counted (and refused), so up to `backlog`
    connections can hold a descriptor beyond the limit for a moment. At least
    `MIN_CONNECTIONS`. E.g. 65,536 open files -> 48,128 connections; 1,024 -> 128.
    """
    if open_files < 0 or open_files > _UNLIMITED_FILES:
        open_files = _UNLIMITED_FILES
    reserve = max(FD_RESERVE_MIN, open_files // 4)
    return max(MIN_CONNECTIONS, open_files - reserve - backlog)


def open_file_limit() -> int:
    """This process's open-file limit (RLIMIT_NOFILE's soft limit; -1: unlimited)."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def raise_open_file_limit() -> int:
    """Raise this process's open-file soft limit to its hard limit, as far as the system
    lets it; the soft limit now. (Go programs and the JVM do the same at start.)"""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if 0 <= hard <= _UNLIMITED_FILES else _UNLIMITED_FILES
    if 0 <= soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft  # e.g. macOS, whose unlimited hard limit is not one setrlimit takes
    return open_file_limit()


def connection_limit(max_connections: int | None, backlog: int) -> int:
    """`max_connections` if set, else the default for this process's open-file limit."""
    if max_connections is not None:
        return max_connections
    return default_max_connections(open_file_limit(), backlog)
