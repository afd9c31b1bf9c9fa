"""The hot path of a node: `GET /v1/tables/{table}/keys/{key}` without the generic dispatch.

Single-key lookups are most of a node's traffic, and the generic path (split, endpoint table,
query parsing, `Call`, handler, locator) costs several times the RocksDB get. The adapters
hand `KeyPath.answer` a GET without a query string as the raw path and the two sparkiq
headers, and it answers the common cases itself:

- the key's partition has a ready active replica here: read it and render the answer (200,
  or 404 for an absent key) with `read_key`, as the generic path does;
- otherwise (another node is the active, or nobody can answer yet): the loop every
  single-partition read goes through (`readloop.read_one`), which forwards the raw
  path and passes the owner's status and body bytes back as they are, or waits;
- a key absent from its partition, on a table whose changelog holds misplaced records and
  asked by a client (not by another node): looked for in every other partition before the
  404 (`sparkiq.http.reads.elsewhere`).

A key of a table of partitioner `any` (no partition follows from a key) is looked for in
every partition the same way; one asked by another node is declined to the generic path.
`sparkiq.http.reads.keyread` holds the read itself and the values a pending read carries.

Anything else -- a path of another shape, an unknown or windowed table, a key that does not
parse or is over the limit, a malformed sparkiq header -- returns None before anything is
read, and the adapter passes the request to `HttpApi.handle`, which answers it by the full
rules. An unexpected error becomes the same 500 as there (`HttpApi.error_answer`). The
answers are the same bytes either way: tests/unit/http/reads/test_keypath.py checks each case
against the generic path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from functools import partial

import orjson

from sparkiq.auth import EVERYONE, Identity
from sparkiq.core.partitioner import placer
from sparkiq.core.queries import Failure
from sparkiq.core.tables import Format
from sparkiq.core.topology import TopicPartition
from sparkiq.http.forwarder import Unreachable
from sparkiq.http.messages.params import codecs, decode_segment, parse_key_text
from sparkiq.http.messages.responses import Outcome, Response, is_absent
from sparkiq.http.reads.apiparts import ApiParts
from sparkiq.http.reads.elsewhere import Beyond, looks_everywhere
from sparkiq.http.reads.keyread import (
    ABSENT_HERE,
    NO_HOME,
    KeyArgs,
    Pending,
    Probe,
    TableEntry,
    read_answer,
)
from sparkiq.http.reads.locate import LocalReplica, ask_budget, new_call
from sparkiq.http.reads.readloop import read_one

PREFIX = b"/v1/tables/"
_KEYS = b"keys"
_MAX_TABLES = 256  # raw table segments remembered (spellings of names, e.g. percent-encoded)
# Enum members as module constants: on Python 3.11 `Outcome.LOCAL` goes through
# EnumType.__getattr__, several times the cost of reading a global.
_LOCAL, _STANDBY, _FORWARDED = Outcome.LOCAL, Outcome.STANDBY, Outcome.FORWARDED
_STRING = Format.STRING


class KeyPath(Beyond):
    """Answers single-key GETs for one `ApiParts`, or declines (None) to the generic path."""

    def __init__(self, api: ApiParts) -> None:
        self._api = api
        self._view = api.view
        self._settings = api.settings
        self._observe = api.metrics.observe
        # The counters of a key found (200), bound once (`HttpMetrics.observer`), by where
        # the answer came from.
        outcomes = (_LOCAL, _STANDBY, _FORWARDED)
        self._found = {o: api.metrics.observer("key", o, 200) for o in outcomes}
        self._resolve = api.locator.resolve
        self._max_key = api.settings.max_key_bytes
        self._forwarder = api.forwarder
        self._tables: dict[bytes, TableEntry] = {}
        self._by_name: dict[str, TableEntry] = {}  # the same entries by table name
        self._node = ""  # the node's URL when `_node_json` was made
        self._node_json = b'""'

    async def answer(
        self,
        path: bytes,
        hops: str | bytes | None,
        budget: str | bytes | None,
        identity: Identity = EVERYONE,
    ) -> Response | None:
        """The answer to GET `path` (raw, percent-encoded, no query), or None to decline.

        `hops` and `budget` are the x-sparkiq-hops and x-sparkiq-budget-ms header values;
        `identity` the caller the gate admitted. A table it may not read is declined (the
        generic path answers the 403).
        """
        found = self.answer_now(path, hops, budget, identity)
        if isinstance(found, Pending):
            return await self.finish(found)
        return Response(200, found) if isinstance(found, bytes) else found

    def answer_now(
        self,
        path: bytes,
        hops: str | bytes | None,
        budget: str | bytes | None,
        identity: Identity = EVERYONE,
    ) -> bytes | Response | Pending | None:
        """`answer` without awaiting: the answer, None to decline, or a `Pending` to `finish`.

        A local read is answered here, synchronously; a server that runs on the node's
        loop (`sparkiq.http.server.loopserver`) then needs no task for the request. A key found
        comes back as the body of its 200 alone (bytes: the common answer, written without
        a `Response`), any other answer as a `Response`. `Pending` is the rest: a forward
        to the owner or a wait for a replica.
        """
        if not path.startswith(PREFIX):
            return None
        started = time.perf_counter()
        try:
            # <table>/keys/<key>: one split checks the shape (no more "/" in the key).
            segments = path[len(PREFIX) :].split(b"/")
            if len(segments) != 3 or segments[1] != _KEYS or not segments[2]:
                return None
            table_segment, _, key_segment = segments
            view = self._view
            entry = self._tables.get(table_segment)
            if entry is None or view.table(entry.table.name) is not entry.table:
                entry = self._learn(table_segment)
                if entry is None:
                    return None
            if not identity.may_read(entry.table.name):
                return None
            # Forwarded to us: headers of ASCII digits only are taken here (a local read does
            # not need the `Call` they make; `new_call` checks them if one is made); any other
            # spelling goes to the generic path, which checks it by the full rules.
            if hops is not None and not (
                hops.isascii()
                and hops.isdigit()
                and (budget is None or (budget.isascii() and budget.isdigit()))
            ):
                return None
            table = entry.table
            # find(), not `in`: `b"%" in key_segment` first tries its operand as an int and
            # raises (and clears) a TypeError inside, which costs more than the search.
            if entry.text_is_wire and key_segment.isascii() and key_segment.find(b"%") < 0:
                if len(key_segment) > self._max_key:
                    return None
                wire = store_key = key_segment
                key_text = key_segment.decode("ascii")
            else:
                text = decode_segment(key_segment.decode("latin-1"))
                if isinstance(text, Failure):
                    return None
                parsed = parse_key_text(table, text, self._max_key)
                if isinstance(parsed, Failure):
                    return None
                wire, key_text = parsed, text
                store_key = entry.codecs[0].wire_to_store(wire)
            node = view.url
            if node is not self._node:
                self._node, self._node_json = node, orjson.dumps(node)
            place = entry.place
            if place is None:  # placement unknown: every partition is asked
                if hops is not None:
                    return None
                everywhere = self._everywhere(entry, key_text, wire, store_key, None)
                if everywhere is None or isinstance(everywhere, Probe):  # ask the others
                    key = (table, entry.codecs, key_text, wire, store_key, NO_HOME, node)
                    first = entry.tps[0]  # none is the key's own: `finish` asks them all
                    return self._probe(path, hops, budget, started, first, key, everywhere)
                response, outcome = everywhere
                return self._observed(response, outcome, started)
            partition = place(wire, table.partitions)
            tp = entry.tps[partition]
            # The common case first: this node's active replica, without a `Placement`.
            local = view.local_active(tp)
            if local is not None:
                store, offset = local
                standby = False
            else:
                found = self._resolve(tp, None)
                if not isinstance(found, LocalReplica):  # forward, or wait
                    key = (table, entry.codecs, key_text, wire, store_key, partition, node)
                    return self._pending(path, hops, budget, started, tp, key, found)
                store, offset, standby = found.store, found.offset, found.is_standby
            response, outcome = read_answer(
                store,
                offset,
                standby,
                table.name,
                entry.name_json,
                entry.codecs,
                key_text,
                wire,
                store_key,
                partition,
                self._node_json,
            )
            if (
                isinstance(response, Response)
                and response.status == 404
                and hops is None
                and view.misplaced_records(table.name)
            ):
                everywhere = self._everywhere(entry, key_text, wire, store_key, partition)
                if everywhere is None or isinstance(everywhere, Probe):  # ask the others
                    key = (table, entry.codecs, key_text, wire, store_key, partition, node)
                    return self._probe(path, hops, budget, started, tp, key, everywhere)
                response, outcome = everywhere
        except Exception as exc:
            text = path.decode("latin-1")
            if self._api.read_raised("GET", text, exc):
                return None  # answered again by the generic path, where the view now says
            response, outcome = self._api.error_answer("GET", text, exc)
        # `_observed`, written out: this is every local lookup's path.
        elapsed = time.perf_counter() - started
        if isinstance(response, bytes):
            self._found[outcome](elapsed)
        else:
            self._observe("key", outcome, response.status, elapsed)
        return response

    def _pending(
        self,
        path: bytes,
        hops: str | bytes | None,
        budget: str | bytes | None,
        started: float,
        tp: TopicPartition,
        key: KeyArgs,
        found: str | Failure,
    ) -> Pending | None:
        """A request to `finish`: forward, wait, or (`ABSENT_HERE`) look in other partitions."""
        call = new_call(self._settings, hops, budget, path.decode("latin-1"))
        if isinstance(call, Failure):  # cannot be (digits checked), but declining is safe
            return None
        return Pending(path, started, tp, call, key, found, found is ABSENT_HERE)

    async def finish(
        self, pending: Pending, asked: Response | Unreachable | None = None
    ) -> Response:
        """The answer to a request `answer_now` left pending: the loop every
        single-partition read goes through (`readloop.read_one`), which forwards
        the raw path and passes the owner's status and body bytes back as they are, or
        waits. `asked`: what the owner answered `forward_now` already."""
        try:
            response, outcome = await self._settle_pending(pending, pending.found, asked)
        except Exception as exc:
            text = pending.path.decode("latin-1")
            if not self._api.read_raised("GET", text, exc):
                response, outcome = self._api.error_answer("GET", text, exc)
            else:
                # Again, without what was found before: the view now says where to read.
                try:
                    response, outcome = await self._settle_pending(pending, None, None)
                except Exception as again:
                    response, outcome = self._api.error_answer("GET", text, again)
        self._observe("key", outcome, response.status, time.perf_counter() - pending.started)
        return response

    async def _settle_pending(
        self,
        pending: Pending,
        found: str | Failure | None,
        asked: Response | Unreachable | None,
    ) -> tuple[Response, Outcome]:
        api = self._api
        if pending.absent_here:
            return await self._elsewhere(pending, asked)
        response, outcome = await read_one(
            api, pending.tp, pending.call, pending.read, found, asked
        )
        if is_absent(response) and looks_everywhere(api, pending.key[0], pending.call):
            further = self._further(pending)
            response, outcome = further or await self._elsewhere(pending)
        return response, outcome

    def forward_now(
        self,
        pending: Pending,
        reply: Callable[[Response], None],
        carry_on: Callable[[Coroutine[object, object, Response]], None],
    ) -> bool:
        """`finish` for the common case without a task or a future: ask the owner on a pooled
        connection (`Forwarder.send_now`) and pass its answer to `reply`.

        False when it cannot start at once (no owner to ask, no pooled connection to take,
        the hop limit): use `finish`. True: exactly one of `reply` (with the owner's answer)
        or `carry_on` is called later, in the request's context. Whatever the fast attempt
        cannot settle -- no answer, a 503 or 508 -- continues in `finish` with what the owner
        said, as if it had asked itself: `carry_on` gets that coroutine to run.
        """
        call = pending.call
        owner = pending.found
        if not isinstance(owner, str) or call.hops >= self._settings.hop_limit:
            return False
        # A partial, not a closure: cheaper to make and to drop, at every forward.
        on_answer = partial(self._forwarded, pending, reply, carry_on)
        # As the read loop asks an active: at most active_timeout_s.
        budget_s = ask_budget(call, self._settings.active_timeout_s)
        return self._forwarder.send_now(
            owner, call.target, hops=call.hops, budget_s=budget_s, on_answer=on_answer
        )

    def _forwarded(
        self,
        pending: Pending,
        reply: Callable[[Response], None],
        carry_on: Callable[[Coroutine[object, object, Response]], None],
        answer: Response | Unreachable | None,
    ) -> None:
        """What the owner said to `forward_now`: its answer to `reply`, or on to `finish`."""
        if pending.absent_here:  # a probe of the node that holds the other partitions
            self._probed(pending, reply, carry_on, answer)
            return
        if (
            isinstance(answer, Response)
            and answer.status == 404
            and pending.call.hops == 0
            and self._view.misplaced_records(pending.key[0].name)
            and is_absent(answer)
        ):
            self._look_further(pending, reply, carry_on)
            return
        if isinstance(answer, Response) and answer.status not in (503, 508):
            elapsed = time.perf_counter() - pending.started
            if answer.status == 200:
                self._found[_FORWARDED](elapsed)
            else:
                self._observe("key", _FORWARDED, answer.status, elapsed)
            reply(answer)
        else:
            carry_on(self.finish(pending, answer))

    def _learn(self, segment: bytes) -> TableEntry | None:
        name = decode_segment(segment.decode("latin-1"))
        if isinstance(name, Failure):
            return None
        table = self._view.table(name)
        if table is None or table.is_windowed:  # windowed: the generic path's 400
            return None
        entry = TableEntry(
            table,
            codecs(table),
            tuple((table.topic, p) for p in range(table.partitions)),
            placer(table.partitioner),
            text_is_wire=table.key_format is Format.STRING,
            name_json=orjson.dumps(table.name),
        )
        if len(self._tables) >= _MAX_TABLES:
            self._tables.clear()
        self._tables[segment] = entry
        self._by_name[table.name] = entry
        return entry
