"""A key looked for outside its own partition, and another node's probe for one.

On a table of partitioner `any` a key has no partition of its own; on a table whose
changelog holds misplaced records, a key absent from its partition may be in another one.
Either way the lowest partition that holds it answers (its own first). Only the node a
client asked looks (`looks_everywhere`); another node asked on its behalf answers for the
listed partitions alone (a *probe*: the internal `partitions=` parameter, `probe_key`).

- `find_key`: every other partition (or the listed ones) is read through the read loop
  (`gather`), with the standby fallback of any read: the generic path.
- `Beyond`: the part of the key path (`KeyPath`) that does the same without the generic
  path. When this node is the active of every other partition, it reads them all at once;
  when one other node is the active of the rest, it reads its own first, then asks that
  node for the key in its partitions that come before any hit here: one GET of the key's
  path with `partitions=` (a probe), sent by callback like a forward
  (`KeyPath.forward_now`), which that node answers with `probe_key`; otherwise, or when the
  probe settles nothing (no answer, a 503), `find_key`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING

from sparkiq.core.queries import Failure
from sparkiq.core.topology import TopicPartition
from sparkiq.http.forwarder import Unreachable
from sparkiq.http.messages.responses import Answer, Outcome, Response, failure_response, is_absent
from sparkiq.http.reads.apiparts import ApiParts
from sparkiq.http.reads.keyread import (
    ABSENT_HERE,
    NO_HOME,
    KeyArgs,
    Pending,
    Probe,
    TableEntry,
    read_answer,
)

if TYPE_CHECKING:
    from sparkiq.http.nodeview import NodeView
    from sparkiq.http.settings import HttpSettings

import orjson

from sparkiq.core import positions
from sparkiq.core.queries import FailureReason
from sparkiq.core.tables import TableDef
from sparkiq.http.messages.params import Params, codecs, partition_list
from sparkiq.http.reads.gather import Gathered, gather
from sparkiq.http.reads.locate import Call

_LOCAL, _FORWARDED = Outcome.LOCAL, Outcome.FORWARDED


class Beyond:
    """`KeyPath`'s look beyond a key's own partition (see the module docstring)."""

    # Set by `KeyPath.__init__` (and `_node_json` by `answer_now`).
    _api: ApiParts
    _view: NodeView
    _settings: HttpSettings
    _observe: Callable[[str, Outcome, int, float], None]
    _found: dict[Outcome, Callable[[float], None]]
    _by_name: dict[str, TableEntry]
    _node_json: bytes

    if TYPE_CHECKING:

        def _pending(
            self,
            path: bytes,
            hops: str | bytes | None,
            budget: str | bytes | None,
            started: float,
            tp: TopicPartition,
            key: KeyArgs,
            found: str | Failure,
        ) -> Pending | None: ...

        def forward_now(
            self,
            pending: Pending,
            reply: Callable[[Response], None],
            carry_on: Callable[[Coroutine[object, object, Response]], None],
        ) -> bool: ...

        async def finish(
            self, pending: Pending, asked: Response | Unreachable | None = None
        ) -> Response: ...

    def _observed(
        self, response: bytes | Response, outcome: Outcome, started: float
    ) -> bytes | Response:
        """`response` (a found key's body, or a whole answer), counted in the metrics."""
        elapsed = time.perf_counter() - started
        if isinstance(response, bytes):
            self._found[outcome](elapsed)
        else:
            self._observe("key", outcome, response.status, elapsed)
        return response

    def _everywhere(
        self, entry: TableEntry, key_text: str, wire: bytes, store_key: bytes, home: int | None
    ) -> tuple[bytes | Response, Outcome] | Probe | None:
        """A key looked for in every partition but `home`; the lowest that holds it answers.

        Read here when this node is the active of all of them. When one other node is the
        active of the rest, this node's are read first: a key found below all of that
        node's partitions is answered; else a `Probe` of the other node's partitions below
        it comes back (`_probe`). None: the others must be asked through `find_key`.
        """
        view = self._view
        stores = []
        remote: list[int] = []
        owner: str | None = None
        for p, tp in enumerate(entry.tps):
            if p == home:
                continue
            local = view.local_active(tp)
            if local is not None:
                stores.append((p, local))
                continue
            active = view.placement(tp).active
            if active is None or (owner is not None and active != owner):
                return None
            owner = active
            remote.append(p)
        table = entry.table
        found: tuple[bytes | Response, Outcome] | None = None
        for p, (store, offset) in stores:
            if store.get(store_key) is not None:
                found = read_answer(
                    store,
                    offset,
                    False,
                    table.name,
                    entry.name_json,
                    entry.codecs,
                    key_text,
                    wire,
                    store_key,
                    p,
                    self._node_json,
                )
                remote = [r for r in remote if r < p]
                break
        if remote:
            assert owner is not None
            query = "?partitions=" + ",".join(map(str, remote))
            return Probe(owner, query, None if found is None else found[0])
        if found is not None:
            return found
        return failure_response(absent_everywhere(table, key_text, home)), _LOCAL

    def _probe(
        self,
        path: bytes,
        hops: str | bytes | None,
        budget: str | bytes | None,
        started: float,
        tp: TopicPartition,
        key: KeyArgs,
        probe: Probe | None,
    ) -> Pending | None:
        """A key to look for in other nodes' partitions: with `probe` (`_everywhere`), a GET
        of the one node that holds them, for `forward_now` to send; without it, or when
        that cannot be sent, `finish` asks every partition (`find_key`)."""
        pending = self._pending(path, hops, budget, started, tp, key, ABSENT_HERE)
        if pending is not None and probe is not None:
            _aim(pending, probe)
        return pending

    def _look_further(
        self,
        pending: Pending,
        reply: Callable[[Response], None],
        carry_on: Callable[[Coroutine[object, object, Response]], None],
    ) -> None:
        """The key's owner answered "absent" to `forward_now` for a table with misplaced
        records: the key is looked for in the other partitions (`_further`)."""
        found = self._further(pending)
        if found is None:
            if isinstance(pending.found, str) and self.forward_now(pending, reply, carry_on):
                return
            carry_on(self.finish(pending))
            return
        response, outcome = found
        self._observed(response, outcome, pending.started)
        reply(response)

    def _further(self, pending: Pending) -> Answer | None:
        """For a key absent from its own partition: the answer if this node's other
        partitions settle it (`_everywhere`), else None with `pending` made the probe of the
        node that holds the rest, or marked for `finish` to ask every partition."""
        table, _, key_text, wire, store_key, partition, _ = pending.key
        entry = self._by_name.get(table.name)
        found = None
        if entry is not None and entry.table is table:
            found = self._everywhere(entry, key_text, wire, store_key, partition)
        pending.absent_here = True
        if isinstance(found, tuple):
            response, outcome = found
            return (Response(200, response) if isinstance(response, bytes) else response), outcome
        if found is None:
            pending.found = ABSENT_HERE
        else:
            _aim(pending, found)
        return None

    def _probed(
        self,
        pending: Pending,
        reply: Callable[[Response], None],
        carry_on: Callable[[Coroutine[object, object, Response]], None],
        answer: Response | Unreachable | None,
    ) -> None:
        """A probe's answer to `forward_now`: settled (`_settle`) to `reply`, or on to
        `finish`, which asks every partition again."""
        settled = self._settle(pending, answer)
        if settled is None:
            carry_on(self.finish(pending, answer))
            return
        response, outcome = settled
        self._observed(response, outcome, pending.started)
        reply(response)

    def _settle(
        self, pending: Pending, answer: Response | Unreachable | Failure | None
    ) -> Answer | None:
        """What a probe's answer settles: the key found there (200), or absent there and
        so found here (`found_here`) or nowhere (404); None for anything else."""
        if not isinstance(answer, Response):
            return None
        if answer.status == 200:
            return answer, _FORWARDED
        if not is_absent(answer):
            return None
        here = pending.found_here
        if isinstance(here, bytes):  # found here, in a partition after the probed ones
            return Response(200, here), _LOCAL
        table, _, key_text, _, _, partition, _ = pending.key
        home = None if partition == NO_HOME else partition
        return failure_response(absent_everywhere(table, key_text, home)), _FORWARDED

    async def _elsewhere(
        self, pending: Pending, asked: Response | Unreachable | None = None
    ) -> Answer:
        """The key of `pending`, absent from its own partition, from any other one: by the
        probe of the node that holds the rest if there is one (`asked`: its answer, if it
        was sent already), else, or when that settles nothing, from every partition."""
        owner = pending.found
        if pending.absent_here and isinstance(owner, str):  # a probe (`_probe`)
            answer: Response | Unreachable | Failure | None = asked
            if answer is None:
                timeout_s = self._settings.active_timeout_s
                call = pending.call
                answer = await self._api.locator.ask(
                    owner, "GET", call.target, None, call, timeout_s
                )
            settled = self._settle(pending, answer)
            if settled is not None:
                return settled
        table, _, key_text, wire, _, partition, _ = pending.key
        home = None if partition == NO_HOME else partition
        return await find_key(self._api, table, key_text, wire, home, pending.call)


def _aim(pending: Pending, probe: Probe) -> None:
    """Make `pending` the probe of the node that holds the other partitions."""
    pending.found = probe.owner
    pending.call.target += probe.query
    pending.found_here = probe.found_here


def looks_everywhere(api: ApiParts, table: TableDef, call: Call) -> bool:
    """Whether keys missing from their own partition are looked for in every other one:
    on a table of unknown placement, or one whose changelog holds misplaced records. Only
    the node a client asked does it (another node asked on its behalf answers for the
    key's own partition alone)."""
    if call.hops or call.fallback_lag is not None:
        return False
    return not table.has_fixed_placement or api.view.misplaced_records(table.name) > 0


async def probe_key(
    api: ApiParts, table: TableDef, key_text: str, wire: bytes, params: Params, call: Call
) -> Answer:
    """Another node's probe of one key (`GET .../keys/{key}?partitions=...`): the key from
    the listed partitions only, or 404 if none holds it."""
    parts = probed_partitions(params, table, call, "ask for the key without it")
    if isinstance(parts, Failure):
        return _fail(parts)
    return await find_key(api, table, key_text, wire, None, call, only=parts)


def probed_partitions(
    params: Params, table: TableDef, call: Call, instead: str
) -> list[int] | Failure:
    """The partitions a probe lists: only another node may send one (`instead`: what a
    client should do)."""
    if call.hops == 0:
        return Failure(
            FailureReason.BAD_REQUEST, f"partitions is internal to sparkiq nodes; {instead}"
        )
    return partition_list(params["partitions"], table.partitions)


async def find_key(
    api: ApiParts,
    table: TableDef,
    key_text: str,
    wire: bytes,
    home: int | None,
    call: Call,
    *,
    only: Sequence[int] | None = None,
) -> Answer:
    """A key missing from its own partition `home` (None: placement unknown), looked for in
    every other partition (or in `only`): the answer of `GET .../keys/{key}` from where it
    was found."""
    parts = [p for p in range(table.partitions) if p != home] if only is None else only
    plan = {(table.topic, p): [0] for p in parts}
    got = await gather(api, table, [wire], plan, call, probing=True)
    if not isinstance(got, Gathered):
        return got
    hit = got.best(0)
    if hit is None:
        return _fail_as(absent_everywhere(table, key_text, home), got.outcome())
    node = api.view.url
    outcome = Outcome.FORWARDED if hit.node != node else got.outcome()
    answer = {
        "table": table.name,
        "key": codecs(table)[0].render(wire),
        "value": hit.value,
        "partition": hit.partition,
        "offset": hit.offset,
        "token": positions.encode(got.sources.offsets),
        "node": hit.node,
        "standby": hit.standby,
    }
    return Response(200, orjson.dumps(answer)), outcome


def absent_everywhere(table: TableDef, key_text: str, home: int | None) -> Failure:
    """The 404 of a key that no partition of `table` holds (`home`: its own partition)."""
    where = "in any partition" if home is None else f"in partition {home} or any other"
    return Failure(
        FailureReason.NOT_FOUND,
        f"key {key_text!r} is not in table {table.name!r} ({where}: {table.partitions} asked)",
    )


def _fail_as(failure: Failure, outcome: Outcome) -> Answer:
    return failure_response(failure), outcome


def _fail(failure: Failure) -> Answer:
    return failure_response(failure), Outcome.ERROR
