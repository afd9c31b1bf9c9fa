"""The progress topic against Apache Kafka: a pipeline's publisher, a node's follower."""

from __future__ import annotations

import time
import uuid

from sparkiq.core.progress import QueryBatch
from sparkiq.core.tables import TableDef
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.progress import (
    ProgressFollower,
    ProgressPublisher,
    _records_read,
    progress_topic,
    queries_topic,
)
from tests.support.e2e import produce_seeded


def test_a_committed_batch_reaches_a_follower_with_the_changelog_end(bootstrap: str) -> None:
    app = f"progress{uuid.uuid4().hex[:8]}"
    table = TableDef("rewards", f"{app}-rewards", 2)
    create_topic(bootstrap, table.topic, table.partitions)
    produce_seeded(bootstrap, table.topic, keys=40, updates=1, deletes=0, seed=3)
    follower = ProgressFollower(bootstrap, app=app)
    follower.start()
    publisher = ProgressPublisher(bootstrap, {table.name: table}.get, app=app)
    try:
        publisher.batch_done("rewards", 7, {"pos": {"0": 12, "1": 30}})
        publisher.batch_done("unknown-table", 8, {"pos": {"0": 13}})  # skipped, logged
        deadline = time.monotonic() + 20
        while follower.progress.latest("rewards") is None:
            assert time.monotonic() < deadline, "the batch never reached the follower"
            time.sleep(0.05)
    finally:
        publisher.close()
        follower.stop()
    batch = follower.progress.latest("rewards")
    assert batch is not None
    assert batch.batch == 7
    assert batch.sources == {("pos", 0): 12, ("pos", 1): 30}
    # Every record of the changelog was written before the batch committed: its end.
    assert sum(batch.changelog.values()) == 40
    assert follower.progress.covering("rewards", [("pos", 1, 29)]) == batch.changelog
    assert follower.progress.latest("unknown-table") is None
    assert publisher.published == 1
    assert follower.topic == progress_topic(app)


def test_query_figures_reach_a_follower_through_their_own_topic(bootstrap: str) -> None:
    app = f"queries{uuid.uuid4().hex[:8]}"
    follower = ProgressFollower(bootstrap, app=app)
    follower.start()
    publisher = ProgressPublisher(bootstrap, {}.get, app=app)
    sent = [
        QueryBatch("routes", n, 1_000 + n, (), 50, 49.5, 120.0, 410, None, n % 2, n)
        for n in range(3)
    ]
    try:
        for figures in sent:
            publisher.query_done(figures)
        deadline = time.monotonic() + 20
        while len(follower.progress.queries().get("routes", ())) < len(sent):
            assert time.monotonic() < deadline, "the figures never reached the follower"
            time.sleep(0.05)
    finally:
        publisher.close()
        follower.stop()
    assert follower.progress.queries() == {"routes": sent}
    assert follower.progress.latest("routes") is None  # not a table's batch
    assert (publisher.published, publisher.published_queries) == (0, 3)
    assert follower.queries_topic == queries_topic(app) == f"{app}.queries"


def _published(follower: ProgressFollower, table: str, batch: int) -> dict[int, int]:
    deadline = time.monotonic() + 20
    while True:
        latest = follower.progress.latest(table)
        if latest is not None and latest.batch == batch:
            return latest.changelog
        assert time.monotonic() < deadline, f"batch {batch} never reached the follower"
        time.sleep(0.05)


def test_each_batch_publishes_the_changelog_end_after_small_and_large_batches(
    bootstrap: str,
) -> None:
    # After a batch of a few records the end is found from the one published before, after
    # a large one (or the first) from the watermarks: exact either way.
    app = f"progress{uuid.uuid4().hex[:8]}"
    table = TableDef("rewards", f"{app}-rewards", 3)
    create_topic(bootstrap, table.topic, table.partitions)
    follower = ProgressFollower(bootstrap, app=app)
    follower.start()
    publisher = ProgressPublisher(bootstrap, {table.name: table}.get, app=app)
    written = position = 0
    try:
        # (changelog records the batch wrote, source records it read)
        for batch, (records, read) in enumerate([(40, 10), (7, 5), (0, 3), (25, 50_000), (9, 2)]):
            if records:
                produce_seeded(
                    bootstrap, table.topic, keys=records, updates=1, deletes=0, seed=batch
                )
            written += records
            position += read
            publisher.batch_done("rewards", batch, {"pos": {"0": position}})
            assert sum(_published(follower, "rewards", batch).values()) == written, batch
    finally:
        publisher.close()
        follower.stop()


def test_records_read_between_two_positions_of_the_sources() -> None:
    assert _records_read(None, {("pos", 0): 5}) is None
    assert _records_read({("pos", 0): 5, ("pos", 1): 7}, {("pos", 0): 9, ("pos", 1): 7}) == 4
    # A partition new to the sources counts from 0; one that went back counts nothing.
    assert _records_read({("pos", 0): 5}, {("pos", 0): 3, ("pos", 1): 6}) == 6
