"""The process's limit on open files, and raising it as far as it may go.

A serving node holds a descriptor for every client connection, Kafka client connection and
RocksDB file: every store keeps ~6 files open (its lock, WAL, MANIFEST, the directory) plus
its table files, so a node holding thousands of partitions (the first node of a big group,
for a moment) needs tens of thousands, past a soft limit of 1,024 or even 20,000. The soft
limit is the process's own to raise up to the hard one (Go programs and the JVM do so at
start): `sparkiq serve` does before anything else, and so does `Node.start`.
"""

from __future__ import annotations

import resource

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
