"""What a librdkafka client says of its brokers: all down, or one answering again.

librdkafka retries broker connections forever and says so in two ways sparkiq listens to:
its error callback gets `_ALL_BROKERS_DOWN` once every broker it knows is down (the
`_TRANSPORT` errors before it say why), and its statistics, emitted every
`STATS_INTERVAL_MS`, give each broker's connection state (`UP` once one answers). A client
given `**watch_conf(watch)` reports both to *watch* from the thread that polls it.
"""

from __future__ import annotations

import json
from typing import Any, Final, Protocol

from confluent_kafka import KafkaError as CKafkaError

STATS_INTERVAL_MS: Final = 1000


class BrokerWatch(Protocol):
    """What a client reports (`sparkiq.node.brokercontact.BrokerContact` keeps it)."""

    def lost(self, reason: str) -> None: ...

    def reached(self) -> None: ...


def any_broker_up(stats: str) -> bool | None:
    """Whether librdkafka's statistics (JSON) show a connection to a real broker in state UP;
    None when they list no real broker (none configured or learned yet)."""
    brokers = json.loads(stats).get("brokers", {})
    # "internal" and "logical" brokers are librdkafka's own placeholders, not connections.
    real = [b for b in brokers.values() if b.get("source") in ("configured", "learned")]
    if not real:
        return None
    return any(b.get("state") == "UP" for b in real)


class _Listener:
    """The callbacks of one client (they run on the thread that polls it)."""

    def __init__(self, watch: BrokerWatch) -> None:
        self._watch = watch
        self._last_transport: str | None = None

    def on_error(self, err: CKafkaError) -> None:
        code = err.code()
        if code == CKafkaError._TRANSPORT:
            self._last_transport = err.str()
        elif code == CKafkaError._ALL_BROKERS_DOWN:
            # Not the error's own text: librdkafka counts the brokers at another moment than
            # it raises it ("0/1 brokers are down").
            said = "every broker is down"
            if self._last_transport:
                said = f"{said}; last: {self._last_transport}"
            self._watch.lost(said)

    def on_stats(self, stats: str) -> None:
        try:
            up = any_broker_up(stats)
        except ValueError:
            return
        if up:
            self._last_transport = None
            self._watch.reached()


def watch_conf(watch: BrokerWatch) -> dict[str, Any]:
    """Settings that make a confluent-kafka client report its brokers to *watch*."""
    listener = _Listener(watch)
    return {
        "error_cb": listener.on_error,
        "stats_cb": listener.on_stats,
        "statistics.interval.ms": STATS_INTERVAL_MS,
    }
