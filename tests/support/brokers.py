"""The brokers a test can run on: Apache Kafka (the session's `broker` fixture) and, for the
compatibility subset, the dev broker (`dev_broker`, started on first use)."""

from __future__ import annotations

import pytest


def bootstrap_of(request: pytest.FixtureRequest, kind: str) -> str:
    """The session's bootstrap servers of the broker of *kind*.

    Through the broker fixtures, so that a module may override `bootstrap` with this."""
    started = request.getfixturevalue("broker" if kind == "kafka" else "dev_broker")
    return str(started.bootstrap_servers)
