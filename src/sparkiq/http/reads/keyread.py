"""Reading one key from a local replica, and the values a key read carries while it waits.

`read_answer` renders a found key's 200 body as bytes (the loop server writes it without a
`Response`) or the 404; `read_key` is the same as an `Answer` for the generic path. A
`Pending` is a read `KeyPath.answer_now` could not finish at once (a forward, a wait, or a
look beyond the key's own partition); a `Probe` names the other node to ask for the key in
its partitions; a `TableEntry` is what the key path keeps of one table.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from sparkiq.core.partitioner import PlaceFn
from sparkiq.core.queries import Failure, FailureReason
from sparkiq.core.serde import KeyCodec
from sparkiq.core.tables import Format, TableDef
from sparkiq.core.topology import TopicPartition
from sparkiq.core.value_codecs import ValueCodec
from sparkiq.http.deferred import Counted, Runner
from sparkiq.http.messages.responses import Answer, Outcome, Response, failure_response
from sparkiq.http.nodeview import ReadableStore
from sparkiq.http.reads.locate import Call, LocalReplica

# The body of a found key, as a template: the bytes orjson would make of the same dict,
# without building and dumping one.
_ANSWER = (
    b'{"table":%b,"key":%b,"value":%b,"partition":%d,"offset":%d,"token":"%d-%d","node":%b,'
    b'"standby":%b}'
)
# The same without a known offset (a replica whose position is not known yet).
_ANSWER_NO_OFFSET = (
    b'{"table":%b,"key":%b,"value":%b,"partition":%d,"offset":null,"token":"","node":%b,'
    b'"standby":%b}'
)
# Enum members as module constants: on Python 3.11 `Outcome.LOCAL` goes through
# EnumType.__getattr__, several times the cost of reading a global.
_LOCAL, _STANDBY = Outcome.LOCAL, Outcome.STANDBY
_STRING = Format.STRING
# A `Pending`'s key partition on a table of unknown placement (the key has none).
NO_HOME = -1
# A `Pending`'s `found` when the key's partition was read here and had no such key.
ABSENT_HERE = Failure(FailureReason.NOT_FOUND, "absent from its own partition")

# (table, codecs, key text, wire key, store key, partition, node URL): `read_key`'s
# arguments but the replica.
KeyArgs = tuple[TableDef, tuple[KeyCodec, ValueCodec], str, bytes, bytes, int, str]


def read_key(
    table: TableDef,
    pair: tuple[KeyCodec, ValueCodec],
    key_text: str,
    wire: bytes,
    store_key: bytes,
    partition: int,
    replica: LocalReplica,
    node: str,
) -> Answer:
    """A single-key read from a local replica: 200 with the value, or 404 when absent."""
    found, outcome = read_answer(
        replica.store,
        replica.offset,
        replica.is_standby,
        table.name,
        orjson.dumps(table.name),
        pair,
        key_text,
        wire,
        store_key,
        partition,
        orjson.dumps(node),
    )
    return (Response(200, found) if isinstance(found, bytes) else found), outcome


def read_answer(
    store: ReadableStore,
    offset: int | None,
    standby: bool,
    name: str,
    name_json: bytes,
    pair: tuple[KeyCodec, ValueCodec],
    key_text: str,
    wire: bytes,
    store_key: bytes,
    partition: int,
    node_json: bytes,
) -> tuple[bytes | Response, Outcome]:
    """`read_key` with the table's and the node's JSON made already (the key path keeps them),
    and a found key's answer as the body of its 200 alone: the loop server writes that
    without making a `Response` of it (`answer_now`)."""
    outcome = _STANDBY if standby else _LOCAL
    value = store.get(store_key)
    if value is None:
        failure = Failure(
            FailureReason.NOT_FOUND,
            f"key {key_text!r} is not in table {name!r} (partition {partition}, offset {offset})",
        )
        return failure_response(failure), outcome
    key_codec, value_codec = pair
    # A string key renders as the text it was parsed from (`wire` is its UTF-8).
    key_json = orjson.dumps(key_text if key_codec.format is _STRING else key_codec.render(wire))
    # Already-validated JSON bytes, embedded as they are: no parse-and-dump.
    value_json = value_codec.render_json(value)
    standby_json = b"true" if standby else b"false"
    if offset is None:
        body = _ANSWER_NO_OFFSET % (
            name_json,
            key_json,
            value_json,
            partition,
            node_json,
            standby_json,
        )
    else:
        body = _ANSWER % (
            name_json,
            key_json,
            value_json,
            partition,
            offset,
            partition,  # the token: this partition's position, as `positions.one` writes it
            offset,
            node_json,
            standby_json,
        )
    return body, outcome


@dataclass(slots=True)
class Pending(Counted):
    """A single-key GET that needs the owner or a replica that is not ready here yet; the
    app answers it later with it (`seam.Later`, started by `then`)."""

    path: bytes
    started: float  # perf_counter() when the key path took the request
    tp: TopicPartition
    call: Call
    # `read_key`'s arguments but the replica, for `read` (a forward that the owner answers,
    # the common case, never reads here: a tuple is cheaper to make than a partial).
    key: KeyArgs
    found: str | Failure  # what `Locator.resolve` said: the owner's URL, or why none
    # The key's partition answered "absent" here already: look in every other one.
    absent_here: bool = False
    # A probe's: the answer of this node's partition that holds the key, used when the
    # probed (lower) partitions of the other node do not.
    found_here: bytes | Response | None = None
    # As a later answer: the app that starts it (set by the app before it hands the read to
    # a server, which calls `then`), and what `Counted` keeps once started.
    app: Runner = field(init=False)
    done: Callable[[Response], None] | None = field(init=False)
    task: asyncio.Task[Response] | None = field(init=False)
    cancelled: bool = field(init=False)

    def then(self, done: Callable[[Response], None]) -> None:
        """Ask the owner on a pooled connection with callbacks, or finish in a task."""
        self.done = done
        self.task = None
        self.cancelled = False
        app = self.app
        app.gate.in_flight += 1
        if not app.forward_now(self, self.replied, self.run):
            self.run(app.finish(self))

    def read(self, replica: LocalReplica) -> Answer:
        """The answer from a replica of the key's partition here."""
        table, pair, key_text, wire, store_key, partition, node = self.key
        return read_key(table, pair, key_text, wire, store_key, partition, replica, node)


@dataclass(frozen=True, slots=True)
class Probe:
    """A key to ask one other node for, in its partitions that come before any here."""

    owner: str  # the node that is the active of those partitions
    query: str  # "?partitions=..." to add to the key's path
    found_here: bytes | Response | None  # this node's answer if one of its partitions has it


@dataclass(frozen=True, slots=True)
class TableEntry:
    """What the hot path needs of one table, worked out once per definition."""

    table: TableDef
    codecs: tuple[KeyCodec, ValueCodec]
    tps: tuple[TopicPartition, ...]  # by partition number
    place: PlaceFn | None  # the table's partitioner; None: placement unknown (`any`)
    # String keys: the UTF-8 of the path text is both the wire form and the store key, so
    # an ASCII segment without '%' is used as it arrives.
    text_is_wire: bool
    name_json: bytes  # the table's name as JSON, for the answer body
