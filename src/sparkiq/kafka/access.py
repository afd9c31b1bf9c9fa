"""What a Kafka principal may do to the topics sparkiq relies on, asked of the brokers
before a command or a node starts to rely on them, and said in one message when a right is
missing.

Without the check, a missing right surfaces late and far from its cause: a restorer whose
fetches are refused retries forever (the node never becomes ready), a Spark query dies with
a JVM stack. The brokers tell a client what it may do to a topic it may describe (Kafka's
"authorized operations", KIP-430), so the rights on any number of topics are checked in one
request, without trying anything. (A refused group join is said by the group member.)

What is needed and how a refusal reads: `sparkiq.kafka.rights`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin._acl import AclOperation

from sparkiq.core.errors import AccessDeniedError, KafkaError
from sparkiq.kafka.admin import ClientErrors, admin_client
from sparkiq.kafka.rights import (
    DENIED_CODE,
    Need,
    Operation,
    Refusal,
    Resource,
    principal_of,
    refusal_message,
)
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity

__all__ = ["check_rights", "missing_rights"]

log = logging.getLogger("sparkiq.kafka.access")


_IMPLIES_DESCRIBE = frozenset({"READ", "WRITE", "DELETE", "ALTER", "ALL"})


def _granted(operations: Sequence[Any] | None) -> frozenset[str] | None:
    """The operation names of an authorized-operations answer; None when it tells nothing.

    A topic described at all may be described, so an answer without DESCRIBE (none, or an
    empty list from a broker that does not count operations) is one that says nothing.
    """
    if not operations:
        return None
    names = {op.name if isinstance(op, AclOperation) else str(op) for op in operations}
    if names & _IMPLIES_DESCRIBE:
        names.add("DESCRIBE")
    return frozenset(names) if "DESCRIBE" in names or "ALL" in names else None


def _lacks(granted: frozenset[str], operation: Operation) -> bool:
    return "ALL" not in granted and operation.value not in granted


# Errors that mean the brokers could not be asked at all (a refused login, TLS, no answer).
_UNASKED = ("_TIMED_OUT", "_TRANSPORT", "_AUTHENTICATION", "_SSL", "_ALL_BROKERS_DOWN")


def missing_rights(
    bootstrap: str,
    needs: Sequence[Need],
    *,
    security: KafkaSecurity = PLAINTEXT,
    timeout_s: float = 10.0,
) -> list[Refusal]:
    """The *needs* the brokers do not grant to the principal of *security*, in order.

    Only what the brokers tell counts: a topic that does not exist (while the principal may
    describe it) is not a refusal, whoever needs it says so; nor is a topic whose rights a
    broker does not tell (the dev broker). Groups are not asked: a group nobody joined yet
    has no coordinator to describe it, so the group member reports a refused join itself
    (`sparkiq.node.group.membership`). KafkaError when the brokers cannot be asked.
    """
    principal = principal_of(security)
    topics = sorted({n.name for n in needs if n.resource is Resource.TOPIC})
    if not topics:
        return []
    granted: dict[str, frozenset[str]] = {}
    errors = ClientErrors()
    admin = admin_client(bootstrap, security=security, errors=errors)
    futures = admin.describe_topics(
        TopicCollection(topics), include_authorized_operations=True, request_timeout=timeout_s
    )
    failure: str | None = None
    for name, future in futures.items():
        try:
            have = _granted(future.result().authorized_operations)
        except KafkaException as exc:
            err = exc.args[0]
            if err.name() == DENIED_CODE[Resource.TOPIC]:
                granted[name] = frozenset()
            elif err.name() in _UNASKED:
                failure = (
                    f"cannot ask {bootstrap} for the rights on topic {name!r}: "
                    f"{err.str()}{errors.hint(admin, security)}"
                )
            else:
                log.debug("rights on topic %s not told: %s", name, err.str())
            continue
        if have is not None:
            granted[name] = have
    del futures
    if failure is not None:
        raise KafkaError(failure)
    return [
        Refusal(need, principal)
        for need in needs
        if need.resource is Resource.TOPIC
        and need.name in granted
        and _lacks(granted[need.name], need.operation)
    ]


def check_rights(
    bootstrap: str,
    needs: Sequence[Need],
    *,
    doing: str,
    security: KafkaSecurity = PLAINTEXT,
    timeout_s: float = 10.0,
) -> None:
    """AccessDeniedError naming every right of *needs* the brokers do not grant."""
    refused = missing_rights(bootstrap, needs, security=security, timeout_s=timeout_s)
    if refused:
        raise AccessDeniedError(refusal_message(refused, bootstrap, doing))
