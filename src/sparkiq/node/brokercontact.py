"""Whether this node reaches its Kafka brokers, and since when it does not.

A Kafka client of the node reports what it sees (`lost` when every broker is down, `reached`
when one answers again: `sparkiq.kafka.brokerstate`); `BrokerContact` keeps the one state,
logs each change once (never a line per retry) and describes it for `/readyz` and
`/v1/metadata`. A node that cannot reach the brokers still answers what its stores hold:
the state is for operators and load balancers, not a reason to stop serving.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ContactState:
    """Reachable, or unreachable since `since` (epoch seconds) for `reason`."""

    reachable: bool = True
    since: float | None = None
    reason: str | None = None

    def fields(self, now: float) -> dict[str, object]:
        """The `kafka` object of `/readyz` and `/v1/metadata` at *now* (epoch seconds)."""
        if self.reachable or self.since is None:
            return {"reachable": True}
        out: dict[str, object] = {
            "reachable": False,
            "unreachable_since": iso_time(self.since),
            "unreachable_s": round(max(now - self.since, 0.0), 1),
        }
        if self.reason:
            out["reason"] = self.reason
        return out


class BrokerContact:
    """The node's contact with its brokers, fed by its Kafka clients from any thread."""

    def __init__(self, bootstrap: str, *, clock: Callable[[], float] = time.time) -> None:
        self.bootstrap = bootstrap
        self._clock = clock
        self._lock = threading.Lock()
        # Replaced whole, so readers need no lock.
        self.state = ContactState()

    @property
    def is_reachable(self) -> bool:
        return self.state.reachable

    def lost(self, reason: str) -> None:
        """Every broker is down (the client's own judgement, after its retries)."""
        with self._lock:
            if not self.state.reachable:
                return
            self.state = ContactState(reachable=False, since=self._clock(), reason=reason)
        log.warning(
            "cannot reach the Kafka brokers at %s (%s): this node answers what its stores "
            "hold, reads that need newer records wait and answer 503, and it catches up "
            "once they are back",
            self.bootstrap,
            reason,
        )

    def reached(self) -> None:
        """A broker answered."""
        with self._lock:
            before = self.state
            if before.reachable:
                return
            self.state = ContactState()
        lasted = self._clock() - (before.since or 0.0)
        log.info(
            "the Kafka brokers at %s answer again after %.0f s unreachable; catching up",
            self.bootstrap,
            lasted,
        )

    def fields(self) -> dict[str, object]:
        return self.state.fields(self._clock())

    def describe(self) -> str | None:
        """A sentence for people while unreachable (None while reachable)."""
        state = self.state
        if state.reachable or state.since is None:
            return None
        return (
            f"the Kafka brokers at {self.bootstrap} are unreachable since "
            f"{iso_time(state.since)} ({self._clock() - state.since:.0f} s)"
        )


def iso_time(epoch_s: float) -> str:
    """*epoch_s* as ISO 8601 in UTC to the millisecond, e.g. 2026-11-29T10:00:00.123Z."""
    moment = datetime.fromtimestamp(epoch_s, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
