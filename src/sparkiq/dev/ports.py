"""Free TCP ports on loopback for the brokers and nodes sparkiq starts."""

from __future__ import annotations

import random
import socket
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on *host* a moment ago, below the kernel's ephemeral range.

    A port the kernel hands out (bind to port 0) comes from the range it also gives every
    outgoing connection, so in the moment between this check and the server's own bind a
    client elsewhere could take it ("address already in use": a serving node of an e2e test
    died so once). Below that range only another listener can. Where the range starts too
    low to leave room (at 21,000 or below), or no port below it binds, the kernel picks.
    A port is never handed out twice by one process: many are asked for before any is bound.
    """
    low = _ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(200 if low > _LOWEST_PORT + 1000 else 0):
        port = rng.randrange(_LOWEST_PORT, low)
        if port in _handed_out:
            # Free now, but given to a process that has not bound it yet (60 nodes of a
            # local cluster are given their ports before the first one binds).
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


_LOWEST_PORT = 20_000
# The ports this process handed out: never handed out twice.
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux), 32768 if unknown."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768
    return low
