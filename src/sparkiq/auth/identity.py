"""An authenticated caller and the tables it may read."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sparkiq.core.errors import ConfigError

ALL_TABLES = "*"


@dataclass(frozen=True, slots=True)
class Identity:
    """A caller: who (for logs) and which tables it may read (None: every table)."""

    subject: str
    tables: frozenset[str] | None
    method: str  # "jwt", "api-key" or "none"

    def may_read(self, table: str) -> bool:
        return self.tables is None or table in self.tables


# Every request of a node that serves without authentication (`--auth none`).
EVERYONE = Identity("anonymous", None, "none")


def parse_tables(value: object, where: str) -> frozenset[str] | None:
    """A tables grant: "*" (or a list holding "*") for all, else a list of table names.

    Raises ValueError (a token's claim) -- callers turn it into their own error.
    """
    if value == ALL_TABLES:
        return None
    if isinstance(value, str):
        return frozenset((value,))
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        names: Iterable[str] = value
        granted = frozenset(names)
        return None if ALL_TABLES in granted else granted
    raise ValueError(f'{where} must be "*" or a list of table names, got {value!r}')


def config_tables(value: object, where: str) -> frozenset[str] | None:
    """`parse_tables` for configuration files: a ConfigError instead of ValueError."""
    try:
        return parse_tables(value, where)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
