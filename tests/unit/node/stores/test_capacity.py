"""The stores a node's open-file budget has room for, and what it logs when more are wanted."""

from __future__ import annotations

import logging

import pytest

from sparkiq.core.openfiles import OTHER_FILES, file_budget
from sparkiq.node.stores.capacity import StoreCapacity
from sparkiq.node.stores.storeoptions import FILES_PER_STORE

URL = "http://127.0.0.1:8100"


def test_room_for_stores_is_what_connections_and_the_rest_leave() -> None:
    budget = file_budget(65_536, 1024)
    capacity = StoreCapacity(URL, budget)
    assert budget.connections == 21_418
    assert capacity.stores == (65_536 - OTHER_FILES - 1024 - 21_418) // FILES_PER_STORE
    assert capacity.stores >= 2_000  # the node: 2,000 stores beside 10,000 connections
    assert capacity.stores * FILES_PER_STORE + budget.connections <= 65_536 - OTHER_FILES - 1024
    # Fewer connections leave room for more stores, and too many for none.
    assert StoreCapacity(URL, file_budget(65_536, 1024, 10_000)).stores > capacity.stores
    assert StoreCapacity(URL, file_budget(4_096, 1024, 5_000)).stores == 0


def test_tables_that_do_not_fit_are_told_at_start(caplog: pytest.LogCaptureFixture) -> None:
    capacity = StoreCapacity(URL, file_budget(20_000, 1024))
    with caplog.at_level(logging.INFO):
        assert capacity.check_tables(capacity.stores)
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert not capacity.check_tables(capacity.stores + 100)
    warning = caplog.records[-1]
    assert warning.levelno == logging.WARNING
    needed = 20_000 + 100 * FILES_PER_STORE
    assert f"to at least {needed}" in warning.getMessage()
    assert "--max-connections" in warning.getMessage()


def test_an_assignment_past_the_room_is_an_error_once_per_new_high(
    caplog: pytest.LogCaptureFixture,
) -> None:
    capacity = StoreCapacity(URL, file_budget(20_000, 1024))
    with caplog.at_level(logging.INFO):
        assert capacity.check_assignment(capacity.stores)
        assert not capacity.check_assignment(capacity.stores + 1)
        assert not capacity.check_assignment(capacity.stores + 1)  # said already
        assert not capacity.check_assignment(capacity.stores + 5)
    assert [r.levelno for r in caplog.records] == [logging.ERROR, logging.ERROR]
