"""The process's limit on open files, raising it as far as it may go, and its split between
client connections and stores (`FileBudget`).

A serving node holds a descriptor for every client connection, Kafka client connection and
RocksDB file: every store keeps ~7 files open (its lock, WAL, MANIFEST, info log, the
directory) plus up to 10 table files (`sparkiq.node.stores.storeoptions.FILES_PER_STORE`), so
a node holding thousands of partitions (the first node of a big group, for a moment) needs
tens of thousands, past a soft limit of 1,024 or even 20,000. The soft limit is the
process's own to raise up to the hard one (Go programs and the JVM do so at start): `sparkiq
serve` does before anything else, and so does `Node.start`.

Connections and stores then share what the limit allows, so that neither starves the other:
`OTHER_FILES` are kept for the Kafka clients, the forwarding pool and logs, and the listen
backlog for connections accepted in one burst; of the rest, connections get a third by
default (`--max-connections` caps them: past it a connection is refused) and stores the
other two thirds (a node whose stores would need more says so: `sparkiq.node.node`).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

# RLIM_INFINITY is taken as Linux's default ceiling on open files (fs.nr_open).
UNLIMITED_FILES = 1 << 20


def open_file_limit() -> int:
    """This process's open-file limit (RLIMIT_NOFILE's soft limit; -1: unlimited)."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def raise_open_file_limit() -> int:
    """Raise this process's open-file soft limit to its hard limit, as far as the system
    lets it; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if 0 <= hard <= UNLIMITED_FILES else UNLIMITED_FILES
    if 0 <= soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft  # e.g. macOS, whose unlimited hard limit is not one setrlimit takes
    return open_file_limit()


# The HTTP server's listen backlog (`sparkiq.http.server.loopserver`): connections the loop
# may accept in one turn before any of them is counted against the limit.
LISTEN_BACKLOG = 1024
# Descriptors kept for everything but client connections and stores: the Kafka clients'
# broker connections (catalog reader, restorer, offset probes, group member), the forwarding
# pool's connections to other nodes, the listen socket, logs.
OTHER_FILES = 256
# A connection limit is never set below this, however low the open-file limit (a node that
# cannot hold this many has to have its limit raised: ulimit -n, LimitNOFILE=).
MIN_CONNECTIONS = 128
# Connections' share, by default, of what the limit leaves after the other files and the
# backlog; stores get the rest. A store may hold up to 18 descriptors and a connection one:
# a third leaves 65,536 files room for 21,418 connections and 2,379 stores.
CONNECTIONS_SHARE = 3  # one in this many


@dataclass(frozen=True)
class FileBudget:
    """How a node's open-file limit is split: client connections, stores, the rest."""

    limit: int  # the open-file limit (soft RLIMIT_NOFILE; unlimited taken as 2**20)
    backlog: int  # the listen backlog: connections accepted in one burst before any is refused
    connections: int  # the connection limit (--max-connections or its default)

    @property
    def for_stores(self) -> int:
        """Descriptors left for stores (negative: the connections alone take too many)."""
        return self.limit - OTHER_FILES - self.backlog - self.connections

    def stores(self, files_per_store: int) -> int:
        """Stores that fit, each holding up to `files_per_store` descriptors."""
        return max(self.for_stores, 0) // files_per_store


def file_budget(limit: int, backlog: int, max_connections: int | None = None) -> FileBudget:
    """The budget of an open-file limit of `limit` (negative: unlimited), a listen backlog of
    `backlog`, and `max_connections` connections (None: the default, a third of what the
    other files and the backlog leave, at least `MIN_CONNECTIONS`).

    E.g. 65,536 files and a backlog of 1,024 -> 21,418 connections; 1,024 -> 128.
    """
    if limit < 0 or limit > UNLIMITED_FILES:
        limit = UNLIMITED_FILES
    if max_connections is None:
        usable = limit - OTHER_FILES - backlog
        max_connections = max(MIN_CONNECTIONS, usable // CONNECTIONS_SHARE)
    return FileBudget(limit, backlog, max_connections)
