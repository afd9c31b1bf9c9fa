"""Settings of the HTTP layer: request budget, hop limit, size limits, connection pool,
connection limit and timeouts.

`TunableHttpSettings` holds the ones an operator tunes: `sparkiq.node.settings.NodeSettings` derives
from it, so each is also an option of `sparkiq serve` and a `SPARKIQ_<FIELD>` variable.
`HttpSettings` adds the ones fixed in code; it is the one frozen value the HTTP layer reads,
built by the node from its own settings (`HttpSettings.tuned`). Every field is documented and
bounded here, once; a value out of bounds is a `ConfigError`.

The connection limit (`max_connections`) defaults to the connections' share of the process's
open-file limit (`default_max_connections`, `sparkiq.core.openfiles.FileBudget`).
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_validator,
)

from sparkiq.core.errors import ConfigError
from sparkiq.core.openfiles import file_budget, open_file_limit

# Internal query parameter of a read forwarded to a standby after its active failed: answer
# from this node's own replica if it is at most this many offsets behind, else 503 at once.
# Accepted only together with the hops header (i.e. from another node).
FALLBACK_PARAM = "fallback_lag"


class TunableHttpSettings(BaseModel):
    """The HTTP layer's settings an operator tunes (through `NodeSettings`)."""

    # Defaults are given as `default=`: type checkers see a field's default only there, and
    # code calls `HttpSettings()` with no arguments.
    model_config = ConfigDict(frozen=True, extra="forbid")

    request_budget_s: float = Field(
        default=5.0,
        gt=0,
        description="How long a request may wait for a partition to get a ready owner "
        "(restoring, moving, owner unreachable) before it is answered 503 with Retry-After; "
        "a forwarded request carries what is left of it.",
    )
    standby_max_lag: int = Field(
        default=10_000,
        ge=0,
        description="When a partition's active cannot answer a read (down, timed out, "
        "restoring), a standby at most this many offsets behind the changelog end answers "
        "instead; a request's max_lag=N sets its own bound.",
    )
    active_timeout_s: float = Field(
        default=1.0,
        gt=0,
        description="How long a read waits for the active's answer before asking a standby "
        "(the active is asked again, within the budget, if no standby can answer); also how "
        "long GET /v1/metadata?peers=true waits for the other nodes' answers.",
    )
    hop_limit: int = Field(
        default=3,
        ge=1,
        description="Most times one request may be forwarded between nodes; the node that "
        "would forward it once more answers 508.",
    )
    max_key_bytes: int = Field(
        default=4_096,
        ge=1,
        description="Largest key accepted (wire form, and as path text), in bytes.",
    )
    max_body_bytes: int = Field(
        default=1_048_576, ge=1, description="Largest request body (multi-get) accepted, in bytes."
    )
    max_in_flight: int = Field(
        default=512,
        ge=1,
        description="Requests the node answers at once (forwarded ones included); past it, "
        "429 with Retry-After.",
    )
    forward_pipeline_depth: int = Field(
        default=16,
        ge=1,
        description="Single-key reads forwarded to one owner in one loop iteration share a "
        "connection, up to this many (HTTP/1.1 pipelining); 1 sends each on its own.",
    )
    max_connections: int | None = Field(
        default=None,
        ge=1,
        description="Client connections held open at once (other nodes' included); past it a "
        "new connection is answered 503 (too_many_connections, Retry-After) and closed at "
        "once. Default: a third of the open-file limit (raised to its hard limit at start) "
        "less 256 files for Kafka clients and logs and the listen backlog (1024), at least "
        "128; the other two thirds are the stores' (see 'Running in production').",
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="A connection that sends no request (nor finishes its TLS handshake) "
        "within this many seconds is closed.",
    )
    idle_timeout_s: float = Field(
        default=75.0,
        gt=0,
        description="A keep-alive connection idle this many seconds between requests is closed.",
    )
    request_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="A request whose head or body has not fully arrived this many seconds "
        "after its first bytes is answered 408 and its connection closed.",
    )
    max_watchers: int = Field(
        default=10_000,
        ge=0,
        description="Watches (event streams of a key's or a range's changes) open at once on "
        "this node, relayed ones included; past it a new watch is answered 503 with "
        "Retry-After.",
    )
    watch_heartbeat_s: float = Field(
        default=15.0,
        gt=0,
        description="An idle watch gets a comment line this often, so proxies and clients "
        "keep it open; a relayed watch whose source sends nothing for twice this long (plus "
        "a second) is taken to be cut and is resumed from another replica.",
    )


class HttpSettings(TunableHttpSettings):
    """How the HTTP layer waits, forwards and limits requests: the tunable settings, and
    those fixed in code (tests may set them too)."""

    max_multi_get_keys: int = Field(default=10_000, ge=1, description="Most keys in one multi-get.")
    retry_after_s: int = Field(
        default=1, ge=0, description="The Retry-After (seconds) sent with a 503 or a 429."
    )
    reconnect_pause_s: float = Field(
        default=0.05,
        ge=0,
        description="Pause before asking again an owner that refused the connection: the "
        "cluster map may still name a node that died until the group notices, so do not spin "
        "on it.",
    )
    default_range_limit: int = Field(
        default=100, ge=1, description="Keys in a range page when the request names no limit."
    )
    max_range_limit: int = Field(
        default=1000, ge=1, description="Largest limit a range request may name."
    )
    watch_queue: int = Field(
        default=1_000,
        ge=1,
        description="Changes held for a watch whose client reads slower than the key "
        "changes; past it the watch ends with a `dropped` event (the client resumes with "
        "Last-Event-ID) instead of holding more.",
    )
    max_windows: int = Field(
        default=10_000, ge=1, description="Most windows one answer to a window query may hold."
    )
    pool_per_host: int = Field(
        default=64, ge=1, description="Keep-alive connections kept per owner node for forwarding."
    )

    @classmethod
    def tuned(cls, tunables: TunableHttpSettings) -> HttpSettings:
        """These settings with the tunable ones taken from `tunables` (a node's settings)."""
        return cls(**{name: getattr(tunables, name) for name in TunableHttpSettings.model_fields})

    @model_validator(mode="after")
    def _check_range_limits(self) -> HttpSettings:
        if self.default_range_limit > self.max_range_limit:
            raise ValueError(
                f"default_range_limit ({self.default_range_limit}) must be at most "
                f"max_range_limit ({self.max_range_limit})"
            )
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _as_config_error(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        # The HTTP layer is handed this value by code (the node, tests, benchmarks): a bad one
        # is sparkiq's ConfigError, like every other unusable setting or argument.
        try:
            return handler(data)
        except ValidationError as exc:
            raise ConfigError(f"HTTP settings: {_reasons(exc)}") from None


def _reasons(exc: ValidationError) -> str:
    """`exc`'s errors as `field: what is wrong (got value)`, joined by '; '."""
    reasons = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"])
        if error["type"] == "extra_forbidden":
            reasons.append(
                f"{where}: no such setting; they are {', '.join(HttpSettings.model_fields)}"
            )
        elif where:
            reasons.append(f"{where}: {error['msg']} (got {error['input']!r})")
        else:
            reasons.append(str(error["msg"]).removeprefix("Value error, "))
    return "; ".join(reasons)


# -- the connection limit's default ---------------------------------------------------------


def default_max_connections(open_files: int, backlog: int = 1024) -> int:
    """The connection limit a node with an open-file limit of `open_files` (RLIMIT_NOFILE's
    soft limit; negative: unlimited) and a listen backlog of `backlog` takes by default: the
    connections' share of its file budget (`sparkiq.core.openfiles.file_budget`).

    The backlog is kept out of it: the event loop accepts every connection waiting in the
    listen queue in one turn, before any of them is counted (and refused), so up to
    `backlog` connections can hold a descriptor beyond the limit for a moment. E.g. 65,536
    open files -> 21,418 connections; 1,024 -> 128.
    """
    return file_budget(open_files, backlog).connections


def connection_limit(max_connections: int | None, backlog: int) -> int:
    """`max_connections` if set, else the default for this process's open-file limit."""
    if max_connections is not None:
        return max_connections
    return default_max_connections(open_file_limit(), backlog)
