"""The serving node's settings: one frozen model, every field documented.

Values come from keyword arguments (the CLI passes its options), then environment variables
named `SPARKIQ_<FIELD>` (e.g. `SPARKIQ_BOOTSTRAP_SERVERS`), then the defaults below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_APP = "sparkiq"


class NodeSettings(BaseSettings):
    """Settings of one serving node."""

    model_config = SettingsConfigDict(env_prefix="SPARKIQ_", frozen=True, extra="forbid")

    bootstrap_servers: str = Field(
        "127.0.0.1:9092",
        description="Kafka bootstrap servers (host:port[,host:port...]).",
    )
    app: str = Field(
        DEFAULT_APP,
        description="Application id: the consumer group is '<app>.serving' and the catalog "
        "topic '<app>.catalog'. Nodes of one cluster share it.",
    )
    listen: str = Field("127.0.0.1:8100", description="host:port the HTTP API binds to.")
    advertised_url: str | None = Field(
        None,
        description="Base URL other nodes and clients use to reach this node; "
        "defaults to http://<listen>.",
    )
    state_dir: Path = Field(
        Path("state"),
        description="Directory of this node's RocksDB stores; reused across restarts so "
        "only the changelog tail is replayed.",
    )
    standby_replicas: int = Field(
        1, ge=0, description="Standby copies of every partition, kept on other nodes."
    )
    acceptable_lag: int = Field(
        10_000,
        ge=0,
        description="A node takes over a partition's active role only once it is at most "
        "this many offsets behind; until then it warms up as a standby.",
    )
    session_timeout_ms: int = Field(
        6_000,
        ge=1_000,
        description="Consumer group session timeout: how fast a dead node is noticed.",
    )
    heartbeat_interval_ms: int = Field(
        1_000, ge=100, description="Consumer group heartbeat interval."
    )
    request_budget_s: float = Field(
        5.0,
        gt=0,
        description="How long a request may wait for a restoring or moving partition before "
        "answering 503 with Retry-After.",
    )
    standby_max_lag: int = Field(
        10_000,
        ge=0,
        description="When a partition's active cannot answer a read (down, timed out, "
        "restoring), a standby at most this many offsets behind answers instead; a request's "
        "max_lag=N sets its own bound.",
    )
    active_timeout_s: float = Field(
        1.0,
        gt=0,
        description="How long a read waits for the active's answer before asking a standby.",
    )
    hop_limit: int = Field(
        3, ge=1, description="Most times one request may be forwarded between nodes."
    )
    max_key_bytes: int = Field(4_096, ge=1, description="Largest key accepted, in bytes.")
    max_body_bytes: int = Field(
        1_048_576, ge=1, description="Largest request body accepted, in bytes."
    )
    log_level: str = Field("INFO", description="Log level: DEBUG, INFO, WARNING or ERROR.")
    log_format: Literal["text", "json"] = Field(
        "text",
        description="Log format: 'text' (one line per record) or 'json' (one object per line "
        "with time, level, logger, message, node, request_id, exception).",
    )
    access_log: bool = Field(
        False,
        description="Log one INFO line per answered request (endpoint, outcome, status, ms, "
        "request id) on the 'sparkiq.access' logger.",
    )

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"listen must be host:port, got {value!r}")
        return value

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    @property
    def url(self) -> str:
        return (self.advertised_url or f"http://{self.listen}").rstrip("/")

    @property
    def group_id(self) -> str:
        return f"{self.app}.serving"

    @property
    def catalog_topic(self) -> str:
        return f"{self.app}.catalog"
