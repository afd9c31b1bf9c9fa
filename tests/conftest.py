"""Shared fixtures: one Apache Kafka broker per test session (and the dev broker, started on
first use, for the tests that also check compatibility with it; and a secured Apache Kafka,
started on first use, for the tests of rights), unique topic names, free ports."""

from __future__ import annotations

import gc
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from sparkiq.dev.devbroker import DevBroker
from sparkiq.dev.kafkabroker import KafkaBroker
from sparkiq.dev.ports import free_port

# The shared helpers (some are plugins of their test modules) get pytest's assert messages.
pytest.register_assert_rewrite("tests.support")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give each of schemathesis' per-operation items its own node id, and refuse a suite in
    which two items share one.

    schemathesis names them `test_fuzz[GET /v1/tables]` but gives them all the test
    function's node id; pytest-xdist, which `scripts/test` runs the suite with, tells items
    apart by node id and ran one operation per fuzz test (34 of 1,567 items went unrun,
    silently). Their id is made as pytest makes every other item's: the parent's and the name.
    """
    for item in items:
        if "[" in item.name and "[" not in item.nodeid and item.parent is not None:
            item._id = item.parent.id.child(item.name)  # type: ignore[attr-defined]
    seen: dict[str, int] = {}
    for item in items:
        seen[item.nodeid] = seen.get(item.nodeid, 0) + 1
    shared = sorted(nodeid for nodeid, n in seen.items() if n > 1)
    if shared:
        raise pytest.UsageError(f"items share a node id (pytest-xdist would run one): {shared}")


if TYPE_CHECKING:
    from tests.support.secured import SecuredKafka


@pytest.fixture(scope="session")
def broker() -> Iterator[KafkaBroker]:
    """Apache Kafka, one KRaft node, shared by the session: tests make topics of their own."""
    with KafkaBroker() as b:
        yield b
        # Clients that only an exception's traceback still holds (a reference cycle through
        # its frames) go while the broker is up, not retrying against a stopped one.
        gc.collect()


@pytest.fixture(scope="session")
def bootstrap(broker: KafkaBroker) -> str:
    return broker.bootstrap_servers


@pytest.fixture(scope="session")
def dev_broker() -> Iterator[DevBroker]:
    """The memory-only dev broker, for the compatibility tests (started on first use)."""
    with DevBroker() as b:
        yield b
        gc.collect()


@pytest.fixture(scope="session")
def dev_bootstrap(dev_broker: DevBroker) -> str:
    return dev_broker.bootstrap_servers


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    def make(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:10]}"

    return make


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture(scope="module", params=["kafka", "dev"])
def any_bootstrap(request: pytest.FixtureRequest) -> str:
    """Apache Kafka, then the dev broker: a module (or test) that asks for it runs on both
    (the compatibility subset)."""
    from tests.support.brokers import bootstrap_of

    return bootstrap_of(request, request.param)


@pytest.fixture(scope="session")
def secured_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
    """Apache Kafka with SCRAM-SHA-512 over TLS and ACLs enforced (started on first use):
    its users have no right until a test grants one; tests use topics of their own."""
    from tests.support.secured import SecuredKafka

    kafka = SecuredKafka(tmp_path_factory.mktemp("secured-kafka")).start()
    try:
        yield kafka
        gc.collect()
    finally:
        kafka.stop()
