"""Every exception sparkiq raises, under one root.

    SparkiqError
    ├── ConfigError            a setting or argument cannot be used as given
    ├── BrokerError            the dev broker cannot be started or does not answer
    ├── KafkaError             a Kafka call failed (topic missing, timeout, produce failure)
    │   ├── TopicNotFoundError
    │   └── AccessDeniedError  the principal lacks a right (ACL) on a topic or group
    ├── FormatError            bytes or text that do not parse in a table's key/value format
    │   └── KeyFormatError
    ├── CatalogError           a table definition is missing, invalid or conflicting
    │   └── UnknownTableError
    ├── StoreError             a local store cannot be opened or written
    │   ├── StateDirMismatchError
    │   ├── StateDirLockedError  another process holds the state dir
    │   └── StorageFault       RocksDB reported corruption or an I/O error: rebuild
    │       └── DiskFull       no space left: retry once space returns
    └── ClientError            the Python client could not get an answer from any node
        ├── BadNodeUrl         a node URL that is not http(s)://HOST[:PORT]
        └── NodesUnreachable   no node accepted a connection (the client was told not to wait)

Failures of a *query* (absent key, partition restoring, not the owner) are not exceptions:
they are values (`sparkiq.core.queries.FailureReason`) that only the HTTP layer maps to statuses.
"""

from __future__ import annotations


class SparkiqError(Exception):
    """Root of every sparkiq exception."""


class ConfigError(SparkiqError):
    """A setting or argument cannot be used as given."""


class BrokerError(SparkiqError):
    """The dev broker cannot be started or does not answer."""


class KafkaError(SparkiqError):
    """A Kafka call failed."""


class TopicNotFoundError(KafkaError):
    """A topic that must exist does not."""


class AccessDeniedError(KafkaError):
    """The brokers do not grant the client's principal a right it needs on a topic or group."""


class FormatError(SparkiqError):
    """Bytes or text that do not parse in the declared format."""


class KeyFormatError(FormatError):
    """A key that does not parse in the table's key format."""


class CatalogError(SparkiqError):
    """A table definition is missing, invalid or conflicting."""


class UnknownTableError(CatalogError):
    """No table of that name is registered."""


class StoreError(SparkiqError):
    """A local store cannot be opened or written."""


class StateDirMismatchError(StoreError):
    """A state directory holds data written for another table or partition count."""


class StateDirLockedError(StoreError):
    """Another process (another node) holds the lock of the state directory."""


class StorageFault(StoreError):
    """A store's files failed it: RocksDB reported corruption or an I/O error on a read,
    a write or at open. The replica is rebuilt from the changelog."""


class DiskFull(StorageFault):
    """A write found no space left on the state dir's device; the store is intact up to its
    last checkpoint and resumes once space returns."""


class ClientError(SparkiqError):
    """The Python client could not get an answer from any node."""


class BadNodeUrl(ClientError):
    """A node URL that is not http(s)://HOST[:PORT]."""


class NodesUnreachable(ClientError):
    """No node accepted a connection, and the client was told not to wait for one."""
