"""Queries as values, and failures as data.

The HTTP layer parses a request into one of these frozen queries, a node answers it from a
local store or by forwarding, and only the HTTP layer turns a `Failure` into a status code.
Keys here are *wire* bytes: the bytes of the Kafka record key, the ones the partitioner sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FailureReason(StrEnum):
    """Why a query got no answer; the HTTP layer maps each to one status."""

    UNKNOWN_TABLE = "unknown_table"  # 404
    NOT_FOUND = "not_found"  # 404: the key is absent (or deleted)
    BAD_REQUEST = "bad_request"  # 400: key/parameter does not parse, body malformed
    NOT_WINDOWED = "not_windowed"  # 400: a window query on a kv table
    WINDOWED = "windowed"  # 400: a key read or key watch on a windowed table
    TOO_LARGE = "too_large"  # 413: key or body over the limit
    LOOP_DETECTED = "loop_detected"  # 508: hop limit reached while forwarding
    UNAVAILABLE = "unavailable"  # 503 + Retry-After: restoring / moving / owner unreachable


@dataclass(frozen=True, slots=True)
class Failure:
    reason: FailureReason
    message: str
    retry_after_s: float | None = None


@dataclass(frozen=True, slots=True)
class KeyQuery:
    table: str
    key: bytes
    max_lag: int | None = None


@dataclass(frozen=True, slots=True)
class MultiKeyQuery:
    table: str
    keys: tuple[bytes, ...]
    max_lag: int | None = None


@dataclass(frozen=True, slots=True)
class RangeQuery:
    """Keys in [lo, hi] (store order), optionally only those starting with prefix."""

    table: str
    lo: bytes | None = None
    hi: bytes | None = None
    prefix: bytes | None = None
    limit: int = 100
    # Resume after this store key (exclusive); from the previous page's next_cursor.
    after: bytes | None = None
    max_lag: int | None = None


@dataclass(frozen=True, slots=True)
class WindowQuery:
    """Windows of one key whose start lies in [from_ms, to_ms]."""

    table: str
    key: bytes
    from_ms: int
    to_ms: int
    max_lag: int | None = None


class Order(StrEnum):
    """The order of a scan: ascending keys (and window starts), or descending (newest first)."""

    ASC = "asc"
    DESC = "desc"


class ReplicaRole(StrEnum):
    ACTIVE = "active"
    STANDBY = "standby"


@dataclass(frozen=True, slots=True)
class Freshness:
    """Which changelog offset an answer reflects, and who gave it."""

    partition: int
    offset: int  # next offset the store will apply (records < offset are reflected)
    node: str
    role: ReplicaRole = ReplicaRole.ACTIVE
