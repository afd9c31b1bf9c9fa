"""Topic administration: create, describe and wait for topics."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from typing import Any, Protocol

from confluent_kafka import KafkaError as CKafkaError
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.cimpl import NewTopic

from sparkiq.core.errors import KafkaError, TopicNotFoundError
from sparkiq.kafka.clientlog import LOG_CONF
from sparkiq.kafka.rights import DENIED_CODE, Need, Operation, Resource, denied
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity


class ClientErrors:
    """librdkafka's error callback for one client: keeps the last errors it reported.

    A request to a broker the client cannot talk to (wrong credentials, TLS against a
    plaintext listener) only fails with "timed out" or "transport failure"; the reason
    (e.g. "SASL authentication error ...") reaches the error callback alone.
    """

    def __init__(self) -> None:
        self._seen: deque[str] = deque(maxlen=3)
        self.refusal: str | None = None  # a login refused or a TLS handshake failed

    def __call__(self, err: CKafkaError) -> None:
        self._seen.append(err.str())
        if err.code() in (CKafkaError._AUTHENTICATION, CKafkaError._SSL) or (
            err.code() == CKafkaError._TRANSPORT and "SSL handshake failed" in err.str()
        ):
            self.refusal = err.str()

    def hint(self, client: AdminClient, security: KafkaSecurity) -> str:
        """What to add to a failure message: the client's last errors and how it connects."""
        client.poll(0)  # serves the error callbacks the failed request left queued
        reported = [e for e in self._seen if "brokers are down" not in e]
        if self.refusal is not None:  # the reason, whatever came after it
            reported.append(self.refusal)
        said = f"; the client reported: {reported[-1]}" if reported else ""
        return f"{said} (connecting with {security.summary})"


def admin_client(
    bootstrap_servers: str,
    extra: Mapping[str, str] | None = None,
    *,
    security: KafkaSecurity = PLAINTEXT,
    errors: ClientErrors | None = None,
) -> AdminClient:
    # Never let a metadata request create a topic: brokers with auto-creation on would
    # otherwise create a mistyped topic with their default partition count.
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "allow.auto.create.topics": False,
    }
    conf.update(security.librdkafka_conf())
    conf.update(extra or {})
    if errors is not None:
        conf["error_cb"] = errors
    return AdminClient({**conf, **LOG_CONF})


def create_topic(
    bootstrap_servers: str,
    name: str,
    partitions: int,
    *,
    config: Mapping[str, str] | None = None,
    exist_ok: bool = True,
    timeout_s: float = 10.0,
    security: KafkaSecurity = PLAINTEXT,
    replication_factor: int | None = None,
) -> None:
    """Create *name* with *partitions* partitions and *replication_factor* replicas (None:
    the brokers' `default.replication.factor`, and their `min.insync.replicas` unless
    *config* says otherwise)."""
    if partitions < 1:
        raise KafkaError(f"topic {name!r} needs at least one partition, got {partitions}")
    errors = ClientErrors()
    admin = admin_client(bootstrap_servers, security=security, errors=errors)
    futures = admin.create_topics(
        [
            NewTopic(
                name,
                partitions,
                -1 if replication_factor is None else replication_factor,
                config=dict(config or {}),
            )
        ],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    failure: str | None = None
    refused: str | None = None
    for topic, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            err = exc.args[0]
            if err.name() == DENIED_CODE[Resource.TOPIC]:
                refused = topic
            elif not (exist_ok and err.name() == "TOPIC_ALREADY_EXISTS"):
                failure = f"cannot create topic {topic!r}: {err.str()}"
                if err.code() in (CKafkaError._TIMED_OUT, CKafkaError._TRANSPORT):
                    failure += errors.hint(admin, security)
    # The futures hold the admin client in a reference cycle through their exception;
    # drop them now so the client closes at once rather than at the next collection.
    del futures
    if refused is not None:
        need = Need(Resource.TOPIC, refused, Operation.CREATE)
        raise denied([need], security, bootstrap_servers, "create a topic")
    if failure is not None:
        raise KafkaError(failure)
    wait_for_topic(bootstrap_servers, name, timeout_s=timeout_s, security=security)


# The slices an admin client's metadata request is waited for in, so that a refusal the
# error callback reports ends the wait (see `metadata_of`).
_METADATA_SLICE_S = 0.5


def metadata_of(
    admin: AdminClient, topic: str | None, timeout_s: float, errors: ClientErrors | None
) -> Any:
    """`admin.list_topics(topic)` within `timeout_s`, asked in short slices: when `errors`
    has seen the brokers refuse the login or the TLS handshake fail, the wait ends at once
    (a retry could not succeed) with the last slice's KafkaException."""
    deadline = time.monotonic() + timeout_s
    while True:
        slice_s = min(_METADATA_SLICE_S, max(deadline - time.monotonic(), 0.01))
        try:
            return admin.list_topics(topic=topic, timeout=slice_s)
        except KafkaException as exc:
            code = exc.args[0].code()
            if code not in (CKafkaError._TIMED_OUT, CKafkaError._TRANSPORT):
                raise
            if time.monotonic() >= deadline:
                raise
            if errors is not None:
                admin.poll(0)  # serves the error callbacks queued meanwhile
                if errors.refusal is not None:
                    raise


class _HasMetadata(Protocol):
    # Returns confluent-kafka's ClusterMetadata (not exported under a public name).
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...


def count_partitions(client: _HasMetadata, topic: str, where: str, timeout_s: float) -> int:
    """Partitions of *topic* as seen by *client* (admin, producer or consumer).

    TopicNotFoundError if it does not exist; *where* names the cluster in messages.
    """
    try:
        md = client.list_topics(topic=topic, timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaError(f"cannot read metadata of topic {topic!r}: {exc}") from exc
    return _partitions_in(md, topic, where)


def _partitions_in(md: Any, topic: str, where: str, security: KafkaSecurity = PLAINTEXT) -> int:
    """Partitions of *topic* in cluster metadata *md*; TopicNotFoundError if it has none,
    AccessDeniedError if the principal may not describe it."""
    info = md.topics.get(topic)
    if (
        info is not None
        and info.error is not None
        and info.error.name() == DENIED_CODE[Resource.TOPIC]
    ):
        need = Need(Resource.TOPIC, topic, Operation.DESCRIBE)
        raise denied([need], security, where, f"read topic {topic!r}")
    if info is None or info.error is not None or not info.partitions:
        raise TopicNotFoundError(f"topic {topic!r} does not exist on {where}; create it first")
    return len(info.partitions)


def partition_count(
    bootstrap_servers: str,
    topic: str,
    *,
    timeout_s: float = 10.0,
    security: KafkaSecurity = PLAINTEXT,
) -> int:
    """Number of partitions of *topic*; TopicNotFoundError if it does not exist."""
    errors = ClientErrors()
    admin = admin_client(bootstrap_servers, security=security, errors=errors)
    try:
        md = metadata_of(admin, topic, timeout_s, errors)
    except KafkaException as exc:
        raise KafkaError(
            f"cannot read metadata of topic {topic!r}: {exc}{errors.hint(admin, security)}"
        ) from exc
    return _partitions_in(md, topic, bootstrap_servers, security)


def topic_exists(
    bootstrap_servers: str,
    topic: str,
    *,
    timeout_s: float = 10.0,
    security: KafkaSecurity = PLAINTEXT,
) -> bool:
    """Whether *topic* exists (as far as the principal may describe it)."""
    try:
        partition_count(bootstrap_servers, topic, timeout_s=timeout_s, security=security)
    except TopicNotFoundError:
        return False
    return True


def list_topics(
    bootstrap_servers: str, *, timeout_s: float = 10.0, security: KafkaSecurity = PLAINTEXT
) -> dict[str, int]:
    """Every topic on the cluster with its partition count."""
    errors = ClientErrors()
    admin = admin_client(bootstrap_servers, security=security, errors=errors)
    try:
        md = metadata_of(admin, None, timeout_s, errors)
    except KafkaException as exc:
        raise KafkaError(
            f"cannot list the topics on {bootstrap_servers}: {exc}{errors.hint(admin, security)}"
        ) from exc
    return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}


def wait_for_topic(
    bootstrap_servers: str,
    topic: str,
    *,
    timeout_s: float = 10.0,
    security: KafkaSecurity = PLAINTEXT,
) -> int:
    """Wait until *topic* shows in metadata with its partitions; returns the count."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return partition_count(
                bootstrap_servers, topic, timeout_s=min(timeout_s, 5.0), security=security
            )
        except TopicNotFoundError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def topic_config(
    bootstrap_servers: str,
    topic: str,
    *,
    timeout_s: float = 10.0,
    security: KafkaSecurity = PLAINTEXT,
) -> dict[str, str]:
    """The settings of *topic* (`cleanup.policy`, `retention.ms`, ...) as the broker has.

    A topic just created may be unknown for a moment to the broker asked (another one than
    the creation's, on a cluster of several): asked again until *timeout_s* has passed.
    """
    errors = ClientErrors()
    admin = admin_client(bootstrap_servers, security=security, errors=errors)
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = max(deadline - time.monotonic(), 0.1)
        futures = admin.describe_configs(
            [ConfigResource("topic", topic)], request_timeout=remaining
        )
        try:
            entries = next(iter(futures.values())).result(remaining)
            break
        except KafkaException as exc:
            unknown = exc.args[0].code() == CKafkaError.UNKNOWN_TOPIC_OR_PART
            if unknown and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            raise KafkaError(
                f"cannot read the settings of topic {topic!r}: {exc}{errors.hint(admin, security)}"
            ) from exc
        finally:
            del futures
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}
