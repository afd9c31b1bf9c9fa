"""A serving node: catalog, stores, restorer, group membership and HTTP API in one process.

The node follows the catalog to learn tables, joins the consumer group `<app>.serving` with
the changelog topics of every table, restores the partitions the assignment gives it
(actives, standbys, warm-ups) into local RocksDB stores, and serves the HTTP API. It is the
`NodeView` the HTTP layer reads: the facts of placement and local replica state, and the
watches of its replicas (`sparkiq.node.watching`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sparkiq.core.openfiles import LISTEN_BACKLOG, file_budget, raise_open_file_limit
from sparkiq.core.progress import PipelineProgress
from sparkiq.core.queries import ReplicaRole
from sparkiq.core.tables import TableDef
from sparkiq.core.topology import ClusterMap, MemberInfo, Placement, TopicPartition
from sparkiq.kafka.access import check_rights
from sparkiq.kafka.catalog import CatalogWatcher
from sparkiq.kafka.progress import ProgressFollower
from sparkiq.kafka.rights import Need
from sparkiq.kafka.roles import serving_needs
from sparkiq.node.brokercontact import BrokerContact
from sparkiq.node.changes import ChangeFeed
from sparkiq.node.freshness import TableFreshness, table_freshness
from sparkiq.node.group.membership import GroupMember
from sparkiq.node.group.rebalance import RebalanceAsker
from sparkiq.node.metadata import describe_local, describe_map
from sparkiq.node.restore import ReplicaState, Restorer
from sparkiq.node.settings import NodeSettings
from sparkiq.node.stores.capacity import StoreCapacity
from sparkiq.node.stores.cleanup import StateCleanup
from sparkiq.node.stores.registry import StoreRegistry
from sparkiq.node.stores.storeoptions import SharedMemory
from sparkiq.node.watching import Watching

if TYPE_CHECKING:
    from sparkiq.node.stores.partitionstore import PartitionStore

log = logging.getLogger("sparkiq.node.node")

# At most this many new stores are opened on the loop when a map arrives (~8 ms each);
# more are opened in a thread.
_OPEN_ON_LOOP = 32

# A module constant for the key path: on Python 3.11 `ReplicaState.ACTIVE` goes through
# EnumType.__getattr__, several times the cost of reading a global.
_ACTIVE = ReplicaState.ACTIVE


class Node(Watching):
    """One serving node; `await run()` until `stop()`. Its watches: `Watching`."""

    def __init__(self, settings: NodeSettings) -> None:
        self.settings = settings
        self._url = settings.url
        self._tables: dict[str, TableDef] = {}
        self._by_topic: dict[str, TableDef] = {}
        self._map = ClusterMap()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._joined = False
        self._catalog_loaded = False
        self._left = False
        self._tasks: set[asyncio.Future[None]] = set()
        self._started_at = time.time()
        self.node_id = load_node_id(settings.state_dir)
        self._refused_url: str | None = None  # set while the group refused this node's URL
        # (position, end) of each local replica when first seen, and the replicas whose lag has
        # since been measured against a real end (see `_lag_known`).
        self._first_seen: dict[TopicPartition, tuple[int, int]] = {}
        self._lag_measured: set[TopicPartition] = set()
        self._followed: set[TopicPartition] = set()  # local replicas seen as STANDBY
        # Rebuilds of each local replica when last seen: a rebuilt store starts afresh.
        self._rebuilds: dict[TopicPartition, int] = {}
        # The (actives, standbys) of the last map, until the restorer follows them, and the
        # task that opens their stores when there are many (`_on_assignment`).
        self._roles_due: tuple[set[TopicPartition], set[TopicPartition]] | None = None
        self._roles_task: asyncio.Future[None] | None = None
        memory_mb = settings.store_memory_mb
        self.registry = StoreRegistry(
            settings.state_dir, SharedMemory(memory_mb << 20) if memory_mb else None
        )
        # Deletes the stores this node no longer holds, `state_cleanup_delay_s` after.
        self.cleanup = StateCleanup(self.registry, settings.state_cleanup_delay_s)
        # The stores this node has room for in its open-file limit (set at start, once the
        # limit is raised).
        self.store_capacity: StoreCapacity | None = None
        self.changes = ChangeFeed()  # what watchers of keys hear of (live reads)
        self.restorer = Restorer(
            settings.bootstrap_servers,
            self.registry,
            self._table_for_topic,
            on_change=self._notify_threadsafe,
            security=settings.kafka_config,
            feed=self.changes,
        )
        # Whether the brokers answer, as the catalog follower (always polling) sees it.
        self.brokers = BrokerContact(settings.bootstrap_servers)
        self.catalog = CatalogWatcher(
            settings.bootstrap_servers,
            app=settings.app,
            on_change=self._on_catalog_threadsafe,
            security=settings.kafka_config,
            watch=self.brokers,
        )
        # What each table's pipeline committed (`after_source` reads).
        self.progress = ProgressFollower(
            settings.bootstrap_servers, app=settings.app, security=settings.kafka_config
        )
        self.member = GroupMember(
            bootstrap=settings.bootstrap_servers,
            group_id=settings.group_id,
            member_info=self._member_info,
            on_assignment=self._on_assignment,
            standby_replicas=settings.standby_replicas,
            acceptable_lag=settings.acceptable_lag,
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
            # The catalog keeps the node in the group; its partition is nobody's to serve.
            unassigned_topics=(settings.catalog_topic,),
            global_topics=self._global_topics,
            security=settings.kafka_config,
        )
        self._rebalances = RebalanceAsker(
            self._url,
            self.restorer,
            cluster_map=lambda: self._map,
            topics=lambda: self._by_topic,
            request=self.member.request_rebalance,
            acceptable_lag=settings.acceptable_lag,
            session_timeout_ms=settings.session_timeout_ms,
        )

    # ---- NodeView -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self._url

    def table(self, name: str) -> TableDef | None:
        return self._tables.get(name)

    def tables(self) -> Sequence[TableDef]:
        return sorted(self._tables.values(), key=lambda t: t.name)

    def placement(self, tp: TopicPartition) -> Placement:
        owners = self._map.owner_of(tp)
        status = self.restorer.status(tp)
        role: ReplicaRole | None = None
        ready = False
        offset: int | None = None
        lag: int | None = None
        known = True
        if status is not None:
            offset, lag = status.position, status.lag
            if status.state is ReplicaState.ACTIVE:
                role, ready = ReplicaRole.ACTIVE, True
            elif status.state is ReplicaState.FAILED:
                # Its store failed it: never read, never a stand-in, until rebuilt.
                offset, lag, known = None, None, False
            else:
                known = self._lag_known(tp, status.position, status.end)
                if status.state is ReplicaState.RESTORING:
                    role = ReplicaRole.ACTIVE
                    # Only a replica that followed the changelog as a standby before it was
                    # promoted may stand in while it restores; one restoring from scratch
                    # would answer "absent" for every key it has not reached yet.
                    known = known and tp in self._followed
                else:
                    role, ready = ReplicaRole.STANDBY, True
        if owners is None:
            return Placement(
                tp=tp,
                active=None,
                local_role=role,
                local_ready=ready,
                local_offset=offset,
                local_lag=lag,
                local_lag_known=known,
            )
        return Placement(
            tp=tp,
            active=owners.active,
            standbys=owners.standbys + owners.warming,
            local_role=role,
            local_ready=ready,
            local_offset=offset,
            local_lag=lag,
            local_lag_known=known,
        )

    def _lag_known(self, tp: TopicPartition, position: int, end: int) -> bool:
        """Whether a standby's or restoring replica's lag is measured against a real end.

        A replica starts with its end equal to its position (lag 0) until the restorer has
        fetched or measured the changelog; until its position or end has moved since it was
        first seen, its lag says nothing, and it must not answer for the active -- unless it
        is a store the restorer had measured on disk before it was assigned (see
        `_on_assignment`). (Otherwise a replica that is caught up on a partition nobody
        writes stays unknown: it just never stands in.)
        """
        if tp in self._lag_measured:
            return True
        first = self._first_seen.get(tp)
        if first is None or first == (position, end) or end == 0:
            return False
        self._lag_measured.add(tp)
        return True

    def store(self, tp: TopicPartition) -> PartitionStore | None:
        return self.restorer.store(tp)

    def local_active(self, tp: TopicPartition) -> tuple[PartitionStore, int | None] | None:
        # placement(tp).is_local_active, without building the Placement: ACTIVE is ready.
        status = self.restorer.status(tp)
        if status is None or status.state is not _ACTIVE:
            return None
        store = self.restorer.store(tp)
        return None if store is None else (store, status.position)

    def catalog_loaded(self) -> bool:
        return self._catalog_loaded

    def pipeline_progress(self) -> PipelineProgress:
        return self.progress.progress

    def misplaced_records(self, table: str) -> int:
        """Records of `table` found outside the partition its partitioner gives their keys:
        per partition the most that any replica in the cluster (or this node's own) counted."""
        tdef = self._tables.get(table)
        if tdef is None:
            return 0
        # Asked on every miss of the key path: one status per partition, not a copy of all.
        shared, status = self._map.misplaced, self.restorer.status
        total = 0
        for p in range(tdef.partitions):
            tp = (tdef.topic, p)
            st = status(tp)
            total += max(shared.get(tp, 0), st.misplaced if st is not None else 0)
        return total

    @property
    def cluster_map(self) -> ClusterMap:
        """The assignment of the group generation this node last joined (for the metrics)."""
        return self._map

    def is_ready(self) -> bool:
        if not self._joined or self._refused_url is not None:
            return False
        statuses = self.restorer.statuses()
        return all(
            statuses.get(tp) is not None and statuses[tp].state is ReplicaState.ACTIVE
            for tp in self._map.actives_of(self._url)
            if tp[0] in self._by_topic
        )

    def kafka_contact(self) -> dict[str, object]:
        return self.brokers.fields()

    def unready_reason(self) -> str | None:
        reason = self._unready_reason()
        unreachable = self.brokers.describe()
        if reason is None or unreachable is None:
            return reason
        return f"{reason}; {unreachable}"

    def _unready_reason(self) -> str | None:
        if self._refused_url is not None:
            return (
                f"another node advertises the same URL {self._refused_url} and started first: "
                "this node holds no partitions; give each node its own --advertised-url"
            )
        if self.is_ready():
            return None
        if not self._joined:
            return "the node has not joined its group yet"
        statuses = self.restorer.statuses()
        actives = self._map.actives_of(self._url)
        failed = sorted(
            (tp, st)
            for tp, st in statuses.items()
            if st.state is ReplicaState.FAILED and tp in actives
        )
        if failed:
            (topic, partition), st = failed[0]
            what = "has no disk space left" if st.disk_full else "failed a storage check"
            return (
                f"the store of partition {partition} of {topic} {what} ({st.fault}); "
                + (
                    "it resumes once there is space"
                    if st.disk_full
                    else "it is rebuilt from the changelog"
                )
                + (f", as are {len(failed) - 1} more" if len(failed) > 1 else "")
            )
        rebuilding = [
            tp for tp, st in statuses.items() if st.rebuilds and st.state is ReplicaState.RESTORING
        ]
        if rebuilding:
            return (
                f"the node is rebuilding {len(rebuilding)} partition(s) from the changelog "
                "after a storage fault"
            )
        return "the node is still restoring its active partitions"

    async def changed(self, timeout_s: float) -> None:
        event = self._changed
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout=max(timeout_s, 0.0))

    def metadata(self) -> dict[str, object]:
        partitions, nodes = describe_map(self._map, self._by_topic)
        return {
            "node": self._url,
            "generation": self._map.generation,
            "ready": self.is_ready(),
            "restored_records": self.restorer.records_applied,
            "node_id": self.node_id,
            "refused": [
                {"node_id": node_id, "url": url}
                for node_id, url in sorted(self._map.refused.items())
            ],
            "tables": [self.table_summary(t) for t in self.tables()],
            "partitions": partitions,
            "nodes": nodes,
            "local": describe_local(self.restorer.statuses(), self._by_topic),
            "stores": {
                "open": self.registry.open_count(),
                "capacity": self.store_capacity.stores if self.store_capacity else None,
                "memory_mb": self.settings.store_memory_mb,
            },
            "cleanup": {
                "delay_s": self.cleanup.delay_s,
                "deleted": self.cleanup.deleted,
                "pending": [p.fields() for p in self.cleanup.pending()],
            },
            "kafka": self.brokers.fields(),
        }

    def table_summary(self, table: TableDef) -> dict[str, object]:
        """`table`'s public description with the misplaced records the cluster found and how
        fresh it is here (`sparkiq.node.freshness`)."""
        out = {**table.summary(), "misplaced_records": self.misplaced_records(table.name)}
        return {**out, **self.freshness(table).fields(time.time_ns() // 1_000_000)}

    def freshness(self, table: TableDef) -> TableFreshness:
        """The newest record this node applied of *table* and its pipeline's last batch."""
        status = self.restorer.status
        statuses = (status((table.topic, p)) for p in range(table.partitions))
        latest = self.progress.progress.latest(table.name)
        return table_freshness(statuses, latest.time_ms if latest is not None else None)

    # ---- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Read the catalog, start restoring and join the group; returns once joined."""
        self._loop = asyncio.get_running_loop()
        self.changes.bind(self._loop)
        files = raise_open_file_limit()
        budget = file_budget(files, LISTEN_BACKLOG, self.settings.max_connections)
        self.store_capacity = capacity = StoreCapacity(self._url, budget)
        self.settings.state_dir.mkdir(parents=True, exist_ok=True)
        # A right the node lacks fails the start with one message naming it, rather than a
        # catalog never read or a partition never restored (`sparkiq.kafka.access`).
        app = self.settings.app
        await asyncio.to_thread(self._check_rights, serving_needs(app, {}))
        await asyncio.to_thread(self.catalog.start)
        self._set_tables(self.catalog.tables())
        self._catalog_loaded = True
        capacity.check_tables(sum(t.partitions for t in self._tables.values()))
        changelogs = {t.name: t.topic for t in self._tables.values()}
        await asyncio.to_thread(self._check_rights, serving_needs(app, changelogs))
        await asyncio.to_thread(self.progress.start)
        self.restorer.start()
        await self.member.start(self._topics())
        self._joined = True
        log.info("node %s joined group %s", self._url, self.settings.group_id)

    async def run_background(self) -> None:
        """Periodic work: ask for a rebalance once a warming partition has caught up; delete
        the stores this node no longer holds once their delay is over."""
        await asyncio.gather(self._rebalances.run(self._stopping), self._clean_state())

    async def _clean_state(self) -> None:
        every_s = self.cleanup.sweep_every_s
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=every_s)
            if self._stopping.is_set():
                return
            try:
                await asyncio.to_thread(self.cleanup.sweep)
            except Exception:
                # A sweep that fails (say a directory it cannot delete) is tried again later;
                # it must not end the rebalance loop it runs beside.
                log.exception("node %s: deleting old stores failed; retrying", self._url)

    async def leave(self) -> None:
        """Leave the group at once: the others take over without waiting for a timeout.

        The stores stay open, so requests still in flight here are answered.
        """
        self._stopping.set()
        if not self._left:
            self._left = True
            await self.member.stop()

    async def stop(self) -> None:
        """Leave the group (if not done yet), then stop restoring and close the stores."""
        try:
            await self.leave()
        finally:
            if self._roles_task is not None:
                self._roles_task.cancel()
            await asyncio.to_thread(self.restorer.stop)
            await asyncio.to_thread(self.catalog.stop)
            await asyncio.to_thread(self.progress.stop)

    # ---- internals ------------------------------------------------------------------

    def _check_rights(self, needs: Sequence[Need]) -> None:
        check_rights(
            self.settings.bootstrap_servers,
            needs,
            doing=f"start the serving node of app {self.settings.app!r}",
            security=self.settings.kafka_config,
        )

    def _topics(self) -> list[str]:
        # The catalog topic keeps the node in the group even before any table exists.
        return sorted({self.settings.catalog_topic, *self._by_topic})

    def _global_topics(self) -> list[str]:
        return [topic for topic, table in self._by_topic.items() if table.is_global]

    def _table_for_topic(self, topic: str) -> TableDef | None:
        return self._by_topic.get(topic)

    def _set_tables(self, tables: Mapping[str, TableDef]) -> None:
        self._tables = dict(tables)
        self._by_topic = {t.topic: t for t in tables.values()}

    def _member_info(self) -> MemberInfo:
        known = set(self._by_topic)
        return MemberInfo(
            url=self._url,
            actives=frozenset(tp for tp in self._map.actives_of(self._url) if tp[0] in known),
            standbys=frozenset(
                tp
                for tp in self._map.standbys_of(self._url) | self._map.warming_of(self._url)
                if tp[0] in known
            ),
            lags={tp: lag for tp, lag in self.restorer.lags().items() if tp[0] in known},
            misplaced={
                tp: st.misplaced
                for tp, st in self.restorer.statuses().items()
                if st.misplaced and tp[0] in known
            },
            instance=self.node_id,
            started_ms=int(self._started_at * 1000),
        )

    def _on_assignment(self, cluster_map: ClusterMap) -> None:
        self._map = cluster_map
        known = set(self._by_topic)
        refused = cluster_map.refused.get(self.node_id)
        if refused is not None and self._refused_url is None:
            log.error(
                "node %s: another node of group %s advertises the same URL and started "
                "first, so this node holds no partitions and is not ready; give each node "
                "the URL others reach it at (--advertised-url, or --listen on its own "
                "address)",
                self._url,
                self.settings.group_id,
            )
        elif refused is None and self._refused_url is not None:
            log.info("node %s: its URL is its own again", self._url)
        self._refused_url = refused
        actives: set[TopicPartition] = set()
        standbys: set[TopicPartition] = set()
        if refused is None:
            actives = {tp for tp in cluster_map.actives_of(self._url) if tp[0] in known}
            standbys = {
                tp
                for tp in cluster_map.standbys_of(self._url) | cluster_map.warming_of(self._url)
                if tp[0] in known
            }
            # A global table's every replica serves its own reads: restored like an active,
            # answering once caught up; the map's active answers for a node still restoring.
            everywhere = {tp for tp in standbys if self._by_topic[tp[0]].is_global}
            actives |= everywhere
            standbys -= everywhere
        log.info(
            "node %s generation %d: %d active, %d standby partitions",
            self._url,
            cluster_map.generation,
            len(actives),
            len(standbys),
        )
        if self.store_capacity is not None:
            self.store_capacity.check_assignment(len(actives | standbys))
        self._roles_due = (actives, standbys)
        if self._roles_task is None or self._roles_task.done():
            opening = len((actives | standbys) - self.restorer.statuses().keys())
            if opening <= _OPEN_ON_LOOP:
                self._apply_roles()
                return
            # Thousands of stores (a first node of a big group holds every partition for a
            # moment) take ~8 ms each to open: in a thread, so the loop keeps heartbeating
            # and answering; maps that arrive meanwhile are applied after it, the last one.
            self._roles_task = asyncio.ensure_future(self._apply_roles_in_thread())
        self._notify()

    def _apply_roles(self) -> None:
        due, self._roles_due = self._roles_due, None
        if due is not None:
            measured = self.restorer.lags()
            self.restorer.assign(*due)
            self._roles_applied(due, measured)

    def _roles_applied(
        self,
        due: tuple[set[TopicPartition], set[TopicPartition]],
        measured: Mapping[TopicPartition, int],
    ) -> None:
        # Stores left on disk by an earlier assignment come back with the lag the restorer
        # measured for them against a real end: they may stand in at once.
        actives, standbys = due
        self._lag_measured.update(
            tp for tp in actives | standbys if tp not in self._first_seen and tp in measured
        )
        self._notify()

    async def _apply_roles_in_thread(self) -> None:
        while (due := self._roles_due) is not None:
            self._roles_due = None
            measured = self.restorer.lags()
            try:
                await asyncio.to_thread(self.restorer.assign, *due)
            except Exception:
                # The map stays; the restorer keeps what it had (`Restorer.assign` opens all
                # or none). Raising would only end this task; the next map tries again.
                log.exception("node %s: cannot open the stores of its assignment", self._url)
                continue
            self._roles_applied(due, measured)

    def _notify(self) -> None:
        self._track_replicas()
        self._changed.set()
        self._changed = asyncio.Event()

    def _track_replicas(self) -> None:
        """Note where each newly assigned local replica started and which ones followed the
        changelog as standbys; forget unassigned ones."""
        statuses = self.restorer.statuses()
        for tp in [tp for tp in self._first_seen if tp not in statuses]:
            del self._first_seen[tp]
            self._lag_measured.discard(tp)
            self._followed.discard(tp)
        for tp in [tp for tp in self._rebuilds if tp not in statuses]:
            del self._rebuilds[tp]
        for tp, st in statuses.items():
            if self._rebuilds.get(tp, st.rebuilds) != st.rebuilds:
                # Rebuilt empty: what was measured or followed before says nothing now.
                self._first_seen.pop(tp, None)
                self._lag_measured.discard(tp)
                self._followed.discard(tp)
            self._rebuilds[tp] = st.rebuilds
            if tp not in self._first_seen:
                self._first_seen[tp] = (st.position, st.end)
            if st.state is ReplicaState.STANDBY:
                self._followed.add(tp)

    def _notify_threadsafe(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._notify)

    def _on_catalog_threadsafe(self, tables: dict[str, TableDef]) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._on_catalog, tables)

    def _on_catalog(self, tables: dict[str, TableDef]) -> None:
        before = set(self._by_topic)
        self._set_tables(tables)
        if set(self._by_topic) != before and self._joined:
            log.info("node %s: catalog now has %d tables; rejoining", self._url, len(tables))
            task = asyncio.ensure_future(self.member.set_topics(self._topics()))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._notify()


def load_node_id(state_dir: Path) -> str:
    """This node's id, kept in its state dir: a restarted process is the same node (its old
    group member may linger until its session times out), another state dir another node."""
    path = state_dir / "node-id"
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        text = ""
    if not text:
        state_dir.mkdir(parents=True, exist_ok=True)
        text = uuid.uuid4().hex
        path.write_text(text + "\n")
    return text
