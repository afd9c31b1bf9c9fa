"""Hosts for multi-host tests: network namespaces on a bridge in the root namespace.

Each host is a network namespace with its own address on a bridge (a veth pair per host,
its default route through the bridge's address). The root namespace keeps the bridge's
address, so a process there (the broker, the test's clients) is reachable from every
host and reaches every host. Making them needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN);
`unavailable()` says why they cannot be made here. Everything made is removed on exit, also
after a failure half-way through, and every process still inside a host is killed by PID.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Host:
    """One namespace: its name (for `ip netns exec`) and its address on the bridge."""

    name: str
    address: str

    @property
    def prefix(self) -> tuple[str, ...]:
        """The command prefix that runs a program on this host (exec, same PID)."""
        return ("ip", "netns", "exec", self.name)


@dataclass(frozen=True)
class Network:
    """The bridge (in the root namespace) and the hosts on it."""

    bridge: str
    gateway: str  # the root namespace's address on the bridge
    hosts: tuple[Host, ...]


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")


def unavailable() -> str | None:
    """Why network namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "multi-host tests make network namespaces and need root"
    if shutil.which("ip") is None:
        return "multi-host tests need iproute2's `ip`"
    probe = f"sqprobe{os.getpid() % 100_000}"
    try:
        _ip("netns", "add", probe)
    except (RuntimeError, OSError) as exc:
        return f"cannot make a network namespace here: {exc}"
    with contextlib.suppress(RuntimeError, OSError):
        _ip("netns", "del", probe)
    return None


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.77.0.0/16 that no route of the root namespace overlaps."""
    routes = subprocess.run(
        ["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True, timeout=30
    ).stdout
    taken = []
    for line in routes.splitlines():
        first = line.split()[0] if line.split() else ""
        with contextlib.suppress(ValueError):
            if first not in ("default", "broadcast", "local"):
                taken.append(ipaddress.ip_network(first, strict=False))
    start = os.getpid() % 200
    for i in range(256):
        net = ipaddress.ip_network(f"10.77.{(start + i) % 256}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise RuntimeError("no free /24 in 10.77.0.0/16 for the test hosts")


def _kill_inside(name: str) -> None:
    listed = subprocess.run(
        ["ip", "netns", "pids", name], capture_output=True, text=True, timeout=30
    ).stdout
    for pid in listed.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


@contextlib.contextmanager
def network(hosts: int) -> Iterator[Network]:
    """`hosts` namespaces on a new bridge; removed again on exit, whatever happened."""
    tag = f"{os.getpid() % 100_000}"
    subnet = _free_subnet()
    addresses = list(subnet.hosts())
    gateway = str(addresses[0])
    bridge = f"sqbr{tag}"
    made_bridge = False
    made: list[Host] = []
    links: list[str] = []
    try:
        _ip("link", "add", bridge, "type", "bridge")
        made_bridge = True
        _ip("addr", "add", f"{gateway}/{subnet.prefixlen}", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for i in range(hosts):
            host = Host(f"sqh{tag}-{i}", str(addresses[10 + i]))
            _ip("netns", "add", host.name)
            made.append(host)
            outside, inside = f"sqv{tag}o{i}", f"sqv{tag}i{i}"
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            links.append(outside)
            _ip("link", "set", outside, "master", bridge)
            _ip("link", "set", outside, "up")
            _ip("link", "set", inside, "netns", host.name)
            _ip("-n", host.name, "addr", "add", f"{host.address}/{subnet.prefixlen}", "dev", inside)
            _ip("-n", host.name, "link", "set", inside, "up")
            _ip("-n", host.name, "link", "set", "lo", "up")
            _ip("-n", host.name, "route", "add", "default", "via", gateway)
        yield Network(bridge, gateway, tuple(made))
    finally:
        for host in made:
            _kill_inside(host.name)
        # Deleting one end of a veth pair deletes both, at once (a namespace's own links go
        # only when the kernel frees it, later).
        for link in links:
            with contextlib.suppress(RuntimeError, OSError):
                _ip("link", "del", link)
        for host in made:
            with contextlib.suppress(RuntimeError, OSError):
                _ip("netns", "del", host.name)
        if made_bridge:
            with contextlib.suppress(RuntimeError, OSError):
                _ip("link", "del", bridge)
