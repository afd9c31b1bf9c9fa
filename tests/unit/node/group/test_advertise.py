"""The URL a node advertises: routable by default, refused when nobody could reach it."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from sparkiq.node.group import advertise
from sparkiq.node.group.advertise import advertised_url, check_advertised, is_loopback, is_wildcard
from sparkiq.node.settings import NodeSettings


@pytest.fixture
def unnamed_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A host whose name resolves to no address of its own: the route to the brokers decides."""
    monkeypatch.setattr(advertise.socket, "gethostname", lambda: "no-such-host.invalid")
    advertise.routable_host.cache_clear()
    yield
    advertise.routable_host.cache_clear()


def test_wildcards_and_loopbacks() -> None:
    assert all(is_wildcard(h) for h in ("0.0.0.0", "::", "[::]", ""))
    assert not is_wildcard("10.0.0.1")
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.1.1", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("10.0.0.1", "node-a", "0.0.0.0"))


def test_a_wildcard_listen_advertises_the_address_that_routes_to_the_brokers(
    unnamed_host: None,
) -> None:
    assert advertised_url("0.0.0.0:8100", "http", "127.0.0.1:9092") == "http://127.0.0.1:8100"
    assert advertised_url("127.0.0.1:8101", "https", "kafka:9092") == "https://127.0.0.1:8101"
    settings = NodeSettings(listen="0.0.0.0:8100", bootstrap_servers="127.0.0.1:9092")
    assert settings.url == "http://127.0.0.1:8100"


def test_a_host_name_that_resolves_here_is_advertised(monkeypatch: pytest.MonkeyPatch) -> None:
    # Some address of this machine other than loopback, if it has one.
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: a route is chosen, nothing sent
            own = probe.getsockname()[0]
    except OSError:
        pytest.skip("this machine has no route off loopback")
    if is_loopback(own):
        pytest.skip("this machine has no address off loopback")
    monkeypatch.setattr(advertise.socket, "gethostname", lambda: own)
    advertise.routable_host.cache_clear()
    try:
        assert advertised_url("0.0.0.0:8100", "http", "127.0.0.1:9092") == f"http://{own}:8100"
    finally:
        advertise.routable_host.cache_clear()


@pytest.mark.parametrize(
    ("url", "bootstrap", "says"),
    [
        ("http://0.0.0.0:8100", "127.0.0.1:9092", "names no host"),
        ("http://[::]:8100", "127.0.0.1:9092", "names no host"),
        ("http://127.0.0.1:8100", "kafka-1:9092,kafka-2:9092", "on loopback"),
        ("http://localhost:8100", "10.0.0.5:9092", "on loopback"),
        ("node-a:8100", "127.0.0.1:9092", "http(s)://HOST:PORT"),
        ("http://node-a", "127.0.0.1:9092", "http(s)://HOST:PORT"),
    ],
)
def test_urls_nobody_could_reach_are_refused(url: str, bootstrap: str, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        check_advertised(url, bootstrap)


def test_reachable_urls_pass() -> None:
    check_advertised("http://node-a:8100", "kafka:9092")
    check_advertised("http://127.0.0.1:8100", "127.0.0.1:9092,localhost:9093")
    check_advertised("https://10.0.0.2:8443", "SASL_SSL://10.0.0.9:9093")


def test_settings_refuse_them_with_what_to_pass() -> None:
    with pytest.raises(ValidationError, match="--advertised-url"):
        NodeSettings(advertised_url="http://0.0.0.0:8100")
    with pytest.raises(ValidationError, match=r"--listen 0\.0\.0\.0:PORT"):
        NodeSettings(bootstrap_servers="kafka-1:9092")  # listens on loopback by default
