"""Whether any of the bootstrap servers accepts a connection, said at once.

A Kafka client given addresses where nothing listens retries for its whole request timeout
and then fails with "transport failure". `check_reachable` opens a TCP connection to each
bootstrap address first (at most `timeout_s` in all) and, when none accepts, raises one
message naming the addresses, what each answered and what to check. It proves only that
something listens there: TLS and SASL problems are still reported by the client's own call.
"""

from __future__ import annotations

import errno
import socket
import time

from sparkiq.core.errors import KafkaError

# The wait a command gives the brokers before it says they cannot be reached.
REACH_TIMEOUT_S = 5.0
# The port of a bootstrap server given without one.
DEFAULT_PORT = 9092


class BrokersUnreachable(KafkaError):
    """No bootstrap server accepted a connection."""


def bootstrap_addresses(bootstrap_servers: str) -> list[tuple[str, int]]:
    """`(host, port)` of each entry of a bootstrap list: `host[:port]`, a `PROTOCOL://`
    prefix and IPv6 brackets allowed, the port 9092 when none is given (as librdkafka does).

    KafkaError for an entry whose port is not a number of 1-65535.
    """
    addresses: list[tuple[str, int]] = []
    for entry in bootstrap_servers.split(","):
        text = entry.strip()
        if not text:
            continue
        _, _, hostport = text.rpartition("://")
        host, sep, port_text = hostport.rpartition(":")
        if not sep or hostport.endswith("]"):  # no port: librdkafka's default
            host, port_text = hostport, str(DEFAULT_PORT)
        host = host.strip("[]")
        if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise KafkaError(
                f"bootstrap server {text!r} is not host:port; write e.g. "
                "--bootstrap-servers 127.0.0.1:9092 (a comma-separated list for several)"
            )
        addresses.append((host, int(port_text)))
    if not addresses:
        raise KafkaError(
            "no bootstrap servers given; write e.g. --bootstrap-servers 127.0.0.1:9092"
        )
    return addresses


def check_reachable(bootstrap_servers: str, *, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Return once one bootstrap address accepts a TCP connection; BrokersUnreachable when
    none does within `timeout_s`."""
    addresses = bootstrap_addresses(bootstrap_servers)
    deadline = time.monotonic() + timeout_s
    answers: list[str] = []
    for host, port in addresses:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            answers.append(f"{host}:{port}: not tried within {timeout_s:g}s")
            continue
        try:
            with socket.create_connection((host, port), timeout=remaining):
                return
        except OSError as exc:
            answers.append(f"{host}:{port}: {_reason(exc, remaining)}")
    raise BrokersUnreachable(
        f"cannot reach a Kafka broker at {bootstrap_servers} ({'; '.join(answers)}); check "
        "--bootstrap-servers (or SPARKIQ_BOOTSTRAP_SERVERS) and that the brokers run and "
        "listen there"
    )


def _reason(exc: OSError, waited_s: float) -> str:
    if isinstance(exc, socket.gaierror):
        return "no such host"
    if isinstance(exc, TimeoutError):
        return f"no answer within {waited_s:.1f}s"
    if exc.errno == errno.ECONNREFUSED:
        return "connection refused"
    return exc.strerror or str(exc)
