"""The URL a node advertises: the one other nodes and clients can reach it at.

A node is known to the others by the URL it advertises (`--advertised-url`, else made from
`--listen`). A wildcard listen address (`0.0.0.0`, `::`) is where it binds, not where it can
be reached, so it advertises this host's name if that resolves to one of its own
non-loopback addresses, else the address of the interface that routes to the first
bootstrap broker. An advertised URL that names no reachable host is refused at start: a
wildcard, or a loopback address while the brokers are elsewhere (other nodes, on other
hosts, could not reach it).
"""

from __future__ import annotations

import ipaddress
import socket
from functools import lru_cache
from urllib.parse import urlsplit

__all__ = ["advertised_url", "check_advertised", "is_loopback", "is_wildcard"]

_WILDCARDS = frozenset(("0.0.0.0", "::", ""))


def _bare(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def is_wildcard(host: str) -> bool:
    """Whether `host` means every address of this machine (where to bind, not to reach)."""
    return _bare(host) in _WILDCARDS


def is_loopback(host: str) -> bool:
    """Whether `host` is this machine's loopback (127.0.0.0/8, ::1, localhost)."""
    host = _bare(host)
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _broker_hosts(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for part in bootstrap.split(","):
        part = part.strip()
        if "://" in part:  # a listener name or scheme before the address
            part = part.split("://", 1)[1]
        host, _, port = part.rpartition(":")
        if host and port.isdigit():
            out.append((_bare(host), int(port)))
    return out


def brokers_on_loopback(bootstrap: str) -> bool:
    """Whether every bootstrap broker is on this machine's loopback."""
    hosts = _broker_hosts(bootstrap)
    return bool(hosts) and all(is_loopback(host) for host, _ in hosts)


def check_advertised(url: str, bootstrap: str) -> None:
    """ValueError, saying what to pass, if other nodes could not reach `url`."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.port is None:
        raise ValueError(
            f"advertised URL {url!r} must be http(s)://HOST:PORT, the address other nodes "
            "and clients reach this node at; write e.g. --advertised-url http://10.0.0.5:8101"
        )
    host = parts.hostname
    if is_wildcard(host):
        raise ValueError(
            f"advertised URL {url!r} names no host (a wildcard is where to listen, not where "
            "to reach); pass --advertised-url with this host's name or address"
        )
    if is_loopback(host) and not brokers_on_loopback(bootstrap):
        raise ValueError(
            f"advertised URL {url!r} is on loopback but the Kafka brokers ({bootstrap}) are "
            "not: nodes on other hosts could not reach this one; pass --listen "
            "0.0.0.0:PORT (it advertises this host's address) or --advertised-url "
            "http://HOST:PORT"
        )


def advertised_url(listen: str, scheme: str, bootstrap: str) -> str:
    """The URL a node that listens on `listen` (host:port) advertises by default."""
    host, _, port = listen.rpartition(":")
    if is_wildcard(host):
        host = routable_host(bootstrap)
    if ":" in _bare(host):  # an IPv6 address goes in brackets in a URL
        host = f"[{_bare(host)}]"
    return f"{scheme}://{host}:{port}"


@lru_cache(maxsize=8)
def routable_host(bootstrap: str) -> str:
    """This host's name, if it resolves to a local non-loopback address; else the address
    of the interface that routes to the first bootstrap broker."""
    name = socket.gethostname()
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(name, None)}
    except OSError:
        addresses = set()
    if any(not is_loopback(address) and _is_local(address) for address in addresses):
        return name
    for host, port in _broker_hosts(bootstrap):
        try:
            family, _, _, _, target = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                probe.connect(target)  # UDP: no packet is sent, the route is chosen
                return str(probe.getsockname()[0])
        except OSError:
            continue
    raise ValueError(
        f"cannot tell this host's address: its name {name!r} does not resolve to a local "
        f"address and no route to the brokers ({bootstrap}) was found; pass --advertised-url"
    )


def _is_local(address: str) -> bool:
    """Whether `address` is one of this machine's (it can be bound)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.bind((address, 0))
        return True
    except OSError:
        return False
