"""Shared fixtures: one dev broker per test session, unique topic names, free ports."""

from __future__ import annotations

import gc
import uuid
from collections.abc import Callable, Iterator

import pytest

from sparkiq.dev.broker import DevBroker, free_port

# The shared helpers (some are plugins of their test modules) get pytest's assert messages.
pytest.register_assert_rewrite("tests.support")


@pytest.fixture(scope="session")
def broker() -> Iterator[DevBroker]:
    with DevBroker() as b:
        yield b
        # Clients that only an exception's traceback still holds (a reference cycle through
        # its frames) go while the broker is up, not retrying against a stopped one.
        gc.collect()


@pytest.fixture(scope="session")
def bootstrap(broker: DevBroker) -> str:
    return broker.bootstrap_servers


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    def make(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:10]}"

    return make


@pytest.fixture
def port() -> int:
    return free_port()
