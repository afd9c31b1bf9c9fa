"""Free ports: below the kernel's ephemeral range, at random, bindable."""

from __future__ import annotations

import socket

import pytest

from sparkiq.dev.ports import _ephemeral_low, free_port


def test_free_ports_are_bindable_and_below_the_ephemeral_range() -> None:
    low = _ephemeral_low()
    if low <= 21_000:
        pytest.skip(f"the ephemeral range starts at {low}: no room below it to pick from")
    ports = {free_port() for _ in range(20)}
    assert all(20_000 <= port < low for port in ports)
    assert len(ports) > 1  # chosen at random, not one fixed port
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))  # still free: nothing listens there


def test_a_port_is_never_handed_out_twice() -> None:
    # 60 nodes are given their ports before the first binds: all must differ (before, 60
    # random picks below the ephemeral range repeated one about once in seven clusters).
    ports = [free_port() for _ in range(600)]
    assert len(set(ports)) == len(ports)
