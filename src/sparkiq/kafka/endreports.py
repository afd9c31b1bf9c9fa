"""Whether a cluster's ListOffsets answers are its partitions' true ends: learned once per
cluster and process, so that reading an end costs one ListOffsets where that is enough.

Apache Kafka answers ListOffsets(latest) with the high watermark, the offset after the last
record. The dev broker answers with the base offset of the last record batch + 1
(../shared/BASELINES.md), so `sparkiq.kafka.offsets` reads each partition's last batch to
find its end, which on Apache Kafka would be a fetch per call for nothing.

The dev broker's ListOffsets also differs in a way that shows at once and on any partition:
it gives no offset for the max-timestamp lookup (KIP-734, Kafka 3.0), where Apache Kafka
gives the offset of the partition's newest record, or -1 when it is empty. One such lookup
per cluster tells the two apart; an answer that is neither (an error, a timeout) leaves the
cluster unclassified and the caller on the safe path (the tail read), to ask again later.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec

from sparkiq.kafka.security import is_security_setting

log = logging.getLogger(__name__)

_known: dict[str, bool] = {}
_lock = threading.Lock()

# librdkafka's "no offset" (RD_KAFKA_OFFSET_INVALID), the dev broker's max-timestamp answer.
_NO_OFFSET = -1001


def lists_true_ends(
    bootstrap_servers: str,
    partitions: Iterable[tuple[str, int]],
    client_conf: Mapping[str, object] | None = None,
    *,
    timeout_s: float = 5.0,
) -> bool:
    """True when *bootstrap_servers*' cluster answers ListOffsets(latest) with true ends.

    Asked once per cluster (through one partition of *partitions*) and remembered; False
    (read the tail) while it cannot tell. *client_conf* are the caller's librdkafka settings;
    only the security ones are used.
    """
    with _lock:
        known = _known.get(bootstrap_servers)
    if known is not None:
        return known
    first = next(iter(partitions), None)
    if first is None:
        return False
    exact = _ask(bootstrap_servers, first, client_conf or {}, timeout_s)
    if exact is None:
        return False
    with _lock:
        _known[bootstrap_servers] = exact
    log.info(
        "%s: ListOffsets %s",
        bootstrap_servers,
        "gives true partition ends" if exact else "may end at a batch's start; reading tails",
    )
    return exact


def _ask(
    bootstrap_servers: str,
    tp: tuple[str, int],
    client_conf: Mapping[str, object],
    timeout_s: float,
) -> bool | None:
    conf: dict[str, str | int | float | bool] = {
        key: value
        for key, value in client_conf.items()
        if is_security_setting(key) and isinstance(value, str | int | float | bool)
    }
    conf["bootstrap.servers"] = bootstrap_servers
    # An unreachable cluster is the caller's to report, with its own message.
    conf["log_level"] = 0
    admin = AdminClient(conf)
    newest = OffsetSpec.max_timestamp()  # type: ignore[no-untyped-call]
    futures = admin.list_offsets({TopicPartition(*tp): newest}, request_timeout=timeout_s)
    try:
        answer = next(iter(futures.values())).result(timeout=timeout_s + 1.0)
    except KafkaException as exc:
        log.debug("%s: cannot classify its ListOffsets now: %s", bootstrap_servers, exc)
        return None
    except Exception as exc:  # a timeout of the future itself
        log.debug("%s: cannot classify its ListOffsets now: %s", bootstrap_servers, exc)
        return None
    finally:
        del futures
    offset = int(answer.offset)
    if offset >= -1:
        return True
    if offset == _NO_OFFSET:
        return False
    return None


def forget() -> None:
    """Drop what was learned (tests that restart a broker on the same address)."""
    with _lock:
        _known.clear()
