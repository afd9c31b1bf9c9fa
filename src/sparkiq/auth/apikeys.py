"""Static API keys: a JSON file of named keys, each with the tables it may read.

    {"keys": [
        {"name": "dashboards", "sha256": "<hex digest of the key>", "tables": ["rewards"]},
        {"name": "ops", "key": "<the key itself>", "tables": "*"}
    ]}

Prefer `sha256` (the file then holds no usable secret); `key` is accepted for development.
Callers send the key in the `X-API-Key` header. Keys are looked up by their SHA-256 digest,
so the lookup takes the same time whatever the key.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson

from sparkiq.auth.identity import Identity, config_tables
from sparkiq.core.errors import ConfigError

API_KEY_HEADER = "x-api-key"
_MIN_KEY_CHARS = 16


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeys:
    """The API keys a node accepts."""

    def __init__(self, identities: dict[str, Identity]) -> None:
        self._by_digest = identities

    @classmethod
    def load(cls, path: Path) -> ApiKeys:
        try:
            doc = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read the API keys file {path}: {exc}") from None
        entries = doc.get("keys") if isinstance(doc, dict) else None
        if not isinstance(entries, list):
            raise ConfigError(f'{path}: expected {{"keys": [...]}}')
        identities: dict[str, Identity] = {}
        for i, entry in enumerate(entries):
            where = f"{path}: keys[{i}]"
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise ConfigError(f"{where} must be an object with a name")
            if isinstance(entry.get("sha256"), str):
                hexdigest = entry["sha256"].lower()
                if len(hexdigest) != 64 or any(c not in "0123456789abcdef" for c in hexdigest):
                    raise ConfigError(f"{where}: sha256 must be 64 hex digits")
            elif isinstance(entry.get("key"), str):
                if len(entry["key"]) < _MIN_KEY_CHARS:
                    raise ConfigError(f"{where}: a key must have at least {_MIN_KEY_CHARS} chars")
                hexdigest = digest(entry["key"])
            else:
                raise ConfigError(f"{where} needs a sha256 (or key)")
            if "tables" not in entry:
                raise ConfigError(f'{where} needs tables (a list of names, or "*")')
            tables = config_tables(entry["tables"], f"{where}.tables")
            if hexdigest in identities:
                raise ConfigError(f"{where}: the same key is listed twice")
            identities[hexdigest] = Identity(entry["name"], tables, "api-key")
        return cls(identities)

    def find(self, key: str) -> Identity | None:
        return self._by_digest.get(digest(key))
