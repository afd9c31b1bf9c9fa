"""The serving node's settings: one frozen model, every field documented and bounded.

Values come from keyword arguments (the CLI passes its options), then environment variables
named `SPARKIQ_<FIELD>` (e.g. `SPARKIQ_BOOTSTRAP_SERVERS`), then the defaults below. The HTTP
layer's tunable settings are fields too, defined once in `TunableHttpSettings`, which
`NodeSettings` derives from. `sparkiq serve`'s options are made from these fields
(`sparkiq.cli.options`): an option's name, variable, type, bounds, default and help are the
field's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_serializer, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from sparkiq.core.errors import ConfigError
from sparkiq.http.settings import TunableHttpSettings
from sparkiq.kafka.roles import serving_group
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity
from sparkiq.node.group.advertise import advertised_url, check_advertised

DEFAULT_APP = "sparkiq"


class NodeSettings(TunableHttpSettings, BaseSettings):
    """Settings of one serving node: its own below, and the HTTP layer's it inherits."""

    model_config = SettingsConfigDict(env_prefix="SPARKIQ_", frozen=True, extra="forbid")

    bootstrap_servers: str = Field(
        "127.0.0.1:9092",
        description="Kafka bootstrap servers (host:port[,host:port...]).",
    )
    kafka_config: Annotated[KafkaSecurity, NoDecode] = Field(
        PLAINTEXT,
        description="Properties file of Kafka client security settings (key=value lines, "
        "librdkafka names: security.protocol, sasl.*, ssl.*) used for every broker "
        "connection; without one, PLAINTEXT.",
    )
    app: str = Field(
        DEFAULT_APP,
        description="Application id: the consumer group is '<app>.serving' and the catalog "
        "topic '<app>.catalog'. Nodes of one cluster share it.",
    )
    listen: str = Field("127.0.0.1:8100", description="host:port the HTTP API binds to.")
    advertised_url: str | None = Field(
        None,
        description="Base URL other nodes and clients use to reach this node; defaults to "
        "http(s)://<listen>, with a wildcard listen host (0.0.0.0, ::) replaced by this "
        "host's name (if it resolves to a local address) or the address of the interface "
        "that routes to the brokers. A wildcard, or a loopback host while the brokers are "
        "elsewhere, is refused.",
    )
    state_dir: Path = Field(
        Path("state"),
        description="Directory of this node's RocksDB stores; reused across restarts so "
        "only the changelog tail is replayed.",
    )
    state_cleanup_delay_s: float = Field(
        600.0,
        ge=0,
        description="The store of a partition this node no longer holds (neither active, "
        "standby nor warming) is closed at once and its directory deleted after this many "
        "seconds, unless the partition comes back first (it then resumes from its "
        "checkpoint); quarantined copies of failed stores are deleted as long after they "
        "were moved aside. Like Kafka Streams' state.cleanup.delay.ms.",
    )
    store_memory_mb: int = Field(
        256,
        ge=0,
        description="Memory all of this node's RocksDB stores share, in MiB: one block cache "
        "that their memtables (up to half of it) are charged to as well; 0 leaves each store "
        "to RocksDB's defaults (a 32 MiB cache and 64 MiB memtables per store, unbounded in "
        "all). The process uses this plus its own overhead (see 'Running in production').",
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
        1_000,
        ge=100,
        description="Consumer group heartbeat interval; keep it a third of the session "
        "timeout or less.",
    )
    log_level: str = Field("INFO", description="Log level: DEBUG, INFO, WARNING or ERROR.")
    # -- authentication (sparkiq.auth): on as soon as a credential source is given --------
    auth: Literal["none", "required"] | None = Field(
        None,
        description="'none' serves without authentication (never the default: a node with no "
        "credential source refuses to start without it); 'required' (implied by any "
        "credential source) checks every request.",
    )
    jwt_secret_file: Path | None = Field(
        None,
        description="Accept HS256 bearer tokens signed with the secret in this file (at least "
        "32 bytes).",
    )
    jwt_public_key_files: tuple[Path, ...] = Field(
        (),
        description="Accept RS256/ES256 bearer tokens verified by these PEM public keys (RSA "
        "or P-256 EC); the option is repeatable.",
    )
    jwks_file: Path | None = Field(
        None,
        description="Accept RS256/ES256 bearer tokens verified by the keys of this JWKS file "
        "(picked by kid; re-read when it changes).",
    )
    jwt_audience: str | None = Field(None, description="Tokens must name this audience (aud).")
    jwt_issuer: str | None = Field(None, description="Tokens must come from this issuer (iss).")
    jwt_tables_claim: str = Field(
        "tables", description='Claim listing the tables a token may read (or "*").'
    )
    api_keys_file: Path | None = Field(
        None,
        description="Accept the X-API-Key values listed in this JSON file (as sha256 digests, "
        "with their tables).",
    )
    cluster_secret_file: Path | None = Field(
        None,
        description="File holding the secret nodes of this cluster sign forwarded requests "
        "with (at least 32 bytes); required with authentication.",
    )
    protect_ops: bool = Field(
        False, description="Require credentials for /healthz, /readyz, /metrics too."
    )
    # -- TLS (sparkiq.http.tls) -------------------------------------------------------------
    tls_cert_file: Path | None = Field(
        None,
        description="Serve HTTPS only, with this PEM certificate (chain); needs the TLS key file.",
    )
    tls_key_file: Path | None = Field(
        None, description="PEM private key of the TLS certificate file."
    )
    tls_ca_file: Path | None = Field(
        None,
        description="CA certificates trusted when forwarding to other nodes over https "
        "(default: the system's).",
    )
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
            raise ValueError(
                f"listen must be host:port with a port of 1-65535, got {value!r}; write e.g. "
                "--listen 127.0.0.1:8101"
            )
        return value

    @model_validator(mode="after")
    def _check_tls(self) -> NodeSettings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError(
                "--tls-cert-file and --tls-key-file go together: give both, or neither"
            )
        return self

    @model_validator(mode="after")
    def _check_url(self) -> NodeSettings:
        check_advertised(self.url, self.bootstrap_servers)
        return self

    @field_validator("kafka_config", mode="before")
    @classmethod
    def _load_kafka_config(cls, value: object) -> KafkaSecurity:
        try:
            if isinstance(value, KafkaSecurity):
                return value
            if isinstance(value, str | Path):
                return KafkaSecurity.from_file(value) if str(value) else PLAINTEXT
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        # Not a mapping: a validation error would print it, passwords included.
        raise ValueError("kafka_config must be a KafkaSecurity or a properties file path")

    @field_serializer("kafka_config")
    def _mask_kafka_config(self, value: KafkaSecurity) -> dict[str, str]:
        return value.masked()  # never dump a password

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    @property
    def url(self) -> str:
        """The URL this node advertises (`sparkiq.node.group.advertise`)."""
        if self.advertised_url:
            return self.advertised_url.rstrip("/")
        scheme = "https" if self.tls_cert_file is not None else "http"
        return advertised_url(self.listen, scheme, self.bootstrap_servers)

    @property
    def group_id(self) -> str:
        return serving_group(self.app)

    @property
    def catalog_topic(self) -> str:
        return f"{self.app}.catalog"
