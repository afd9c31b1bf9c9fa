"""The answers of HTTP API v1 as typed models: what the OpenAPI document's schemas are made of.

The node does not build its answers with these (orjson on dicts, or byte templates on the
key path: `sparkiq.http.reads.keyread`); they describe the answers. `json_schemas()` gives their
JSON Schemas, which `sparkiq.http.messages.openapi` puts in the document with the limits a node's
settings decide (windows, multi-get keys, range page size); tests/unit/http/test_models.py
validates real answers with them.

A field that defaults to None is left out of an answer where it does not apply; it is never
null (the document says so). A field that may be null has no default.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue, models_json_schema
from pydantic_core import core_schema

from sparkiq.core.partitioner import Partitioner
from sparkiq.core.tables import Format, TableKind, WindowLayout
from sparkiq.core.triggers import TriggerMode
from sparkiq.http.messages.errorcodes import ErrorCode

Count = Annotated[int, Field(ge=0)]
Key = Annotated[
    Any,
    Field(
        description="The key as JSON: a string for `string` keys, an integer for `int` and "
        "`long`, the document for `json` and `avro`, base64url for `bytes`."
    ),
]
Value = Annotated[
    Any,
    Field(
        description="The value as JSON: the document for `json` and `avro` values, a string "
        "or integer for `string`, `int` and `long`, base64url for `bytes`."
    ),
]
Offset = Annotated[
    Count | None,
    Field(
        description="The changelog offset the answering replica had reached: every record "
        "before it is reflected in the answer."
    ),
]
Offsets = Annotated[
    dict[Annotated[str, StringConstraints(pattern=r"^[0-9]+$")], int | None],
    Field(description="Partition number -> the offset its answering replica had reached."),
]
Token = Annotated[
    str,
    Field(
        description="A consistency token: the changelog offsets this answer reflects (opaque; "
        "empty when none is known). Pass it as `after=` to a later read, on any node, to be "
        "answered by a replica at least that fresh.",
        pattern=r"^([0-9]+-[0-9]+(\.[0-9]+-[0-9]+)*)?$",
    ),
]
NodeUrl = Annotated[str, Field(description="URL of the node that read the store.")]
Standby = Annotated[
    bool, Field(description="Whether a standby (not the active) answered, for any part.")
]
TablePartition = Annotated[tuple[str, int], Field(description="[table, partition]")]


# -- errors and the node's own answers -------------------------------------------------------------


class ErrorDetail(BaseModel):
    code: ErrorCode
    message: str = Field(description="What went wrong and what to do next, for people.")


class ErrorAnswer(BaseModel):
    """Every error answer: `{"error": {"code", "message"}}`."""

    error: ErrorDetail


class Status(BaseModel):
    """`/healthz`."""

    status: Literal["ok"]


class KafkaContact(BaseModel):
    """Whether the answering node reaches its Kafka brokers. While it does not, it answers
    what its stores hold (reads that need newer records wait, then 503), stays ready if it
    was, and catches up once they are back."""

    reachable: bool
    unreachable_since: str | None = Field(
        default=None,
        description="When the node found every broker down (ISO 8601, UTC); only while "
        "unreachable.",
    )
    unreachable_s: Annotated[float, Field(ge=0)] | None = Field(
        default=None, description="Seconds since then; only while unreachable."
    )
    reason: str | None = Field(
        default=None,
        description="What the Kafka client said of the brokers; only while unreachable.",
    )


class Readiness(BaseModel):
    """A ready `/readyz`: ready also while the brokers are unreachable (`kafka` says so)."""

    status: Literal["ok"]
    kafka: KafkaContact


# -- tables ----------------------------------------------------------------------------------------


class TableSummary(BaseModel):
    """One table, as `GET /v1/tables` and `GET /v1/metadata` list it."""

    name: str
    topic: str = Field(description="The table's changelog topic.")
    partitions: int = Field(ge=1)
    kind: TableKind
    key_format: Format
    value_format: Format
    partitioner: Partitioner = Field(
        description="How the producers placed keys in partitions; `any`: unknown, so a "
        "lookup asks every partition."
    )
    window_size_ms: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="The window size (windowed tables only)."
    )
    retention_ms: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="How long a window is kept after it ends, against the newest window end "
        "of its partition (windowed tables with a retention only).",
    )
    window_layout: WindowLayout | None = Field(
        default=None,
        description="How a window is held in a changelog key, when not sparkiq's own: "
        "`kstreams-window` or `kstreams-session` (a Kafka Streams store's changelog).",
    )
    description: str | None = None
    misplaced_records: Count = Field(
        description="Records the cluster found in another partition than the partitioner "
        "gives their keys; while any are known, a key missing from its partition is looked "
        "for in every other one before a 404."
    )
    newest_record_age_s: Annotated[float, Field(ge=0)] | None = Field(
        default=None,
        description="Seconds since the newest changelog record the answering node applied "
        "of the table was written (its Kafka timestamp); absent before it applied one.",
    )
    last_batch_age_s: Annotated[float, Field(ge=0)] | None = Field(
        default=None,
        description="Seconds since the table's pipeline (`sparkiq run`) last committed a "
        "micro-batch, as the answering node heard; absent when no pipeline publishes "
        "progress for the table.",
    )


class TableList(BaseModel):
    tables: list[TableSummary]


# -- reads -----------------------------------------------------------------------------------------


class KeyAnswer(BaseModel):
    """One key's value, and the replica that read it."""

    table: str
    key: Key
    value: Value
    partition: Count
    offset: Offset
    token: Token
    node: NodeUrl
    standby: Standby


class WindowItem(BaseModel):
    start: int = Field(description="Window start, epoch ms.")
    end: int = Field(description="Window end (start + size), epoch ms.")
    value: Value


NextCursor = Annotated[
    str | None,
    Field(
        description="Pass as `cursor` for the next page; null on the last. A page may hold "
        "fewer items than asked and still have one."
    ),
]


class WindowsAnswer(BaseModel):
    """A page of one key's windows in start order (newest first with `order=desc`), and the
    replica that read them."""

    table: str
    key: Key
    items: list[WindowItem]
    next_cursor: NextCursor
    partition: Count
    offset: Offset
    token: Token
    node: NodeUrl
    standby: Standby


class OwnerAnswer(BaseModel):
    """The nodes that hold one key's partition, as the answering node's map has them."""

    table: str
    key: Key
    partition: Count
    active: str | None = Field(description="URL of the active node; null while nobody is assigned.")
    standbys: list[str]


class MultiGetRequest(BaseModel):
    keys: list[Key] = Field(examples=[["alice", "bob"]])


class MultiGetItem(BaseModel):
    key: Key
    value: Any = Field(description="The value; null when absent.")


class MultiGetAnswer(BaseModel):
    items: list[MultiGetItem] = Field(description="One item per key asked, in the order asked.")
    offsets: Offsets
    token: Token
    standby: Standby


class RangeItem(BaseModel):
    """One entry; `start` and `end` on windowed tables only (each window is one item)."""

    key: Key
    start: int | None = Field(default=None, description="Window start, epoch ms.")
    end: int | None = Field(default=None, description="Window end (start + size), epoch ms.")
    value: Value


class RangeAnswer(BaseModel):
    """One page of a table's entries in key order, across all partitions."""

    items: list[RangeItem]
    next_cursor: NextCursor
    offsets: Offsets
    token: Token
    standby: Standby


class WindowRangeItem(BaseModel):
    """One window of one key."""

    key: Key
    start: int = Field(description="Window start, epoch ms.")
    end: int = Field(description="Window end (start + size), epoch ms.")
    value: Value


class WindowRangeAnswer(BaseModel):
    """One page of the windows of many keys, in (key, window start) order across all
    partitions (reversed with `order=desc`)."""

    items: list[WindowRangeItem]
    next_cursor: NextCursor
    offsets: Offsets
    token: Token
    standby: Standby


# -- the cluster map -------------------------------------------------------------------------------


class RefusedNode(BaseModel):
    node_id: str
    url: str


class PartitionMap(BaseModel):
    """Who holds one partition."""

    table: str
    topic: str
    partition: Count
    active: str | None
    standbys: list[str]
    warming: list[str]
    lags: dict[str, int] = Field(description="Node URL -> offsets behind the changelog end.")
    misplaced: Count


class NodeMap(BaseModel):
    """What one node holds."""

    url: str
    active: list[TablePartition]
    standby: list[TablePartition]
    warming: list[TablePartition]
    lags: dict[str, int] = Field(description="`table/partition` -> offsets behind the end.")


class LocalReplicaStatus(BaseModel):
    """One of the answering node's replicas and how far it has restored."""

    table: str
    partition: Count
    # sparkiq.node.restore.ReplicaState's values (a test keeps them equal): the HTTP layer does
    # not import the restorer.
    state: Literal["restoring", "active", "standby", "failed"]
    position: int
    end: int
    lag: int
    misplaced: Count
    fault: str | None = Field(description="Why the replica failed; null unless it did.")
    rebuilds: Count = Field(description="Times the node rebuilt this store from the changelog.")


class PeerReplicas(BaseModel):
    """What another node said of its own replicas when this one asked it (`peers=true`)."""

    local: list[LocalReplicaStatus] = Field(
        description="Its own replicas and their lag now, as its `local`; empty when it did "
        "not answer."
    )
    error: str | None = Field(
        description="Why it said nothing (no answer within the budget, refused, ...); null "
        "when it answered."
    )


class LocalStores(BaseModel):
    """The answering node's RocksDB stores."""

    open: Count = Field(description="Stores open now.")
    capacity: Count | None = Field(
        description="Stores its open-file limit leaves room for beside its connections (null "
        "before it started)."
    )
    memory_mb: Count = Field(description="--store-memory-mb: the memory they share (0: none).")


class PendingCleanup(BaseModel):
    """A store directory the node no longer holds, deleted unless its partition comes back."""

    table: str
    partition: Count
    path: str
    quarantined: bool = Field(description="A failed store's copy, moved aside.")
    closed_ms: int = Field(description="When it was closed (or moved aside), epoch ms.")
    delete_at_ms: int = Field(description="When it is deleted, epoch ms.")


class StoreCleanup(BaseModel):
    """The stores the answering node deletes after --state-cleanup-delay-s."""

    delay_s: float = Field(ge=0, description="--state-cleanup-delay-s.")
    deleted: Count = Field(description="Store directories deleted since the node started.")
    pending: list[PendingCleanup] = Field(description="Those waiting, soonest first.")


class Metadata(BaseModel):
    """The answering node's view of the cluster."""

    node: str = Field(description="URL of the node that answered.")
    generation: int = Field(
        description="The consumer group generation the map is from (-1 before any)."
    )
    ready: bool
    restored_records: Count
    node_id: str = Field(description="This node's id, kept in its state dir.")
    refused: list[RefusedNode] = Field(
        description="Nodes that advertise a URL an earlier node has: they hold nothing "
        "until given their own --advertised-url."
    )
    tables: list[TableSummary]
    partitions: list[PartitionMap]
    nodes: list[NodeMap]
    local: list[LocalReplicaStatus]
    stores: LocalStores
    cleanup: StoreCleanup
    kafka: KafkaContact
    peers: dict[str, PeerReplicas] | None = Field(
        default=None,
        description="With `peers=true`: node URL -> what each other node holding a replica "
        "said of its own replicas when this node asked it, so every partition's current lag "
        "is known (the map's `lags` are from the last rebalance).",
    )


# -- the pipeline ----------------------------------------------------------------------------------


class QueryFigures(BaseModel):
    """One micro-batch of a streaming query, as `sparkiq run` reported it."""

    batch: Count
    time_ms: int = Field(description="When the batch finished (epoch ms, the pipeline's clock).")
    input_rows: Count
    input_rows_per_s: float = Field(ge=0)
    processed_rows_per_s: float = Field(ge=0)
    batch_ms: Count | None = Field(
        description="The batch's duration; null if Spark gave none. In Real-Time Mode the "
        "epoch's length: records pass through as they arrive, within it."
    )
    state_rows: Count | None = Field(
        description="Rows in the query's state stores; null for a stateless query."
    )
    dead_letters: Count = Field(
        description="Records this batch counted in an observed metric named `dead_letters`."
    )
    dead_letters_total: Count = Field(description="The same, since the pipeline started.")
    trigger: TriggerMode = Field(
        description="How the query runs: micro-batches, or Spark's Real-Time Mode (a batch is "
        "then an epoch)."
    )
    between_epochs_ms: Count | None = Field(
        description="Real-Time Mode: the epoch's time outside its tasks (offset and commit "
        "logs, planning), when records that arrive wait for the next epoch; null in "
        "micro-batches."
    )


class PipelineQuery(BaseModel):
    """One streaming query of the pipeline."""

    name: str
    tables: list[str] = Field(description="The tables it writes (none: a branch to topics).")
    latest: QueryFigures
    history: list[QueryFigures] = Field(description="Its batches since `since_ms`, oldest first.")


class Pipeline(BaseModel):
    """The pipeline's queries as the answering node heard of them."""

    node: str = Field(description="URL of the node that answered.")
    time_ms: int = Field(description="The node's clock when it answered (epoch ms).")
    queries: list[PipelineQuery]


# The models the document's schemas are made from (the others are inside these).
DOCUMENTED: tuple[type[BaseModel], ...] = (
    ErrorAnswer,
    Status,
    Readiness,
    TableList,
    KeyAnswer,
    WindowsAnswer,
    OwnerAnswer,
    MultiGetRequest,
    MultiGetAnswer,
    RangeAnswer,
    WindowRangeAnswer,
    Metadata,
    Pipeline,
)


def json_schemas(ref_template: str = "#/$defs/{model}") -> dict[str, Any]:
    """The JSON Schemas of the `DOCUMENTED` models and of the models and enums inside them,
    by name, referring to each other by `ref_template`; a copy of its own to the caller."""
    return copy.deepcopy(_json_schemas(ref_template))


class _Schemas(GenerateJsonSchema):
    """JSON Schemas as the document gives them: no title per property, and a field that
    defaults to None is optional but never null (module docstring)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        if schema.get("default", ...) is not None:
            return super().default_schema(schema)
        inner = self.generate_inner(schema["schema"])
        kept = [branch for branch in inner.get("anyOf", ()) if branch != {"type": "null"}]
        if len(kept) != 1:
            return inner
        rest = {k: v for k, v in inner.items() if k != "anyOf"}
        return {**kept[0], **rest}


@lru_cache(maxsize=4)
def _json_schemas(ref_template: str) -> dict[str, Any]:
    _, top = models_json_schema(
        [(model, "validation") for model in DOCUMENTED],
        ref_template=ref_template,
        schema_generator=_Schemas,
    )
    schemas: dict[str, Any] = top["$defs"]
    codes = "\n".join(f"- `{c.value}` ({c.status}): {c.when}." for c in ErrorCode)
    schemas["ErrorCode"]["description"] = f"What went wrong, for programs:\n{codes}"
    return schemas
