"""Failed stores: moved aside and rebuilt from the changelog, the replica FAILED meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from sparkiq.core.errors import StorageFault
from sparkiq.core.tables import Format, TableDef
from sparkiq.kafka.admin import create_topic
from sparkiq.node.restore import ReplicaState, Restorer
from sparkiq.node.stores.registry import QUARANTINE_DIR, StoreRegistry
from tests.support.faults import corrupt_ssts
from tests.support.restore import (
    Oracle,
    Tables,
    all_in,
    contents,
    produce,
    random_records,
    wait_for,
)

pytest_plugins = ["tests.support.restore"]


def test_state_dir_of_another_table_is_moved_aside_and_rebuilt(
    bootstrap: str,
    unique_name: Callable[[str], str],
    tables: Tables,
    make_restorer: Callable[..., Restorer],
    tmp_path: Path,
) -> None:
    topic = unique_name("mismatch")
    create_topic(bootstrap, topic, 2)
    oracle: Oracle = {}
    produce(bootstrap, topic, random_records(2, 400, 100, seed=5), oracle)
    old = TableDef(name=topic, topic=topic, partitions=2, key_format=Format.LONG)
    StoreRegistry(tmp_path / "state").open(old, 1).close()
    tables.add(TableDef(name=topic, topic=topic, partitions=2, value_format=Format.STRING))

    restorer = make_restorer()
    tps = [(topic, 0), (topic, 1)]
    restorer.assign(set(tps), set())
    wait_for(lambda: all_in(restorer, tps, ReplicaState.ACTIVE), "both partitions active")
    for tp in tps:
        assert contents(restorer, tp) == oracle[tp[1]]
    status = restorer.status((topic, 1))
    assert status is not None
    assert status.rebuilds == 1
    assert restorer.storage_faults == restorer.rebuilds == 1
    aside = list((tmp_path / "state" / QUARANTINE_DIR).iterdir())
    assert [p.name.rsplit(".", 1)[0] for p in aside] == [f"{topic}.1"]


def test_a_corrupt_store_fails_its_replica_and_is_rebuilt_from_the_changelog(
    bootstrap: str,
    unique_name: Callable[[str], str],
    tables: Tables,
    make_restorer: Callable[..., Restorer],
    tmp_path: Path,
) -> None:
    topic = unique_name("corrupt")
    create_topic(bootstrap, topic, 1)
    tables.add(TableDef(name=topic, topic=topic, partitions=1, value_format=Format.STRING))
    oracle: Oracle = {}
    records = [(0, f"key-{i:06d}".encode(), f"value-{i}-".encode() * 20) for i in range(40_000)]
    produce(bootstrap, topic, records, oracle, flush_every=10_000)
    tp = (topic, 0)
    state = tmp_path / "corrupt-state"
    first = make_restorer(state)
    first.assign({tp}, set())
    wait_for(lambda: all_in(first, [tp], ReplicaState.ACTIVE), "first restore", 60)
    first.stop()
    assert corrupt_ssts(state / topic / "0", files=3, size=8192) > 0

    changes = threading.Semaphore(0)
    second = make_restorer(state, on_change=changes.release)
    second.assign({tp}, set())
    wait_for(lambda: all_in(second, [tp], ReplicaState.ACTIVE), "reopened", 60)
    store = second.store(tp)
    assert store is not None
    faults = 0
    for key in sorted(oracle[0]):  # the overwritten blocks are met by some read
        try:
            store.get(key)
        except StorageFault:
            faults += 1
            break
    assert faults == 1
    # At once: the replica is FAILED, so no reader is handed its store as readable.
    status = second.status(tp)
    assert status is not None
    assert status.state in (ReplicaState.FAILED, ReplicaState.RESTORING), status
    wait_for(
        lambda: all_in(second, [tp], ReplicaState.ACTIVE) and second.store(tp) is not store,
        "rebuilt",
        60,
    )
    assert contents(second, tp) == oracle[0]
    status = second.status(tp)
    assert status is not None
    assert status.rebuilds == 1
    assert status.fault is None
    assert second.storage_faults == second.rebuilds == 1
    assert second.records_applied == len(records)  # all of it again, from the changelog
    assert len(list((state / QUARANTINE_DIR).iterdir())) == 1
