"""The process's limit on open files, raised as far as it may go when a node starts.

Every RocksDB store keeps ~6 files open (its lock, WAL, MANIFEST, the directory) plus its
table files; a node holding thousands of partitions (the first node of a big group, for a
moment) needs tens of thousands, past a soft limit of 1,024 or even 20,000. The soft limit is
the process's own to raise up to the hard one.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)


def raise_open_files_limit() -> int:
    """Set the soft RLIMIT_NOFILE to the hard one (when it can); returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        log.warning("cannot raise the open files limit from %d to %d: %s", soft, hard, exc)
        return soft
    return hard
