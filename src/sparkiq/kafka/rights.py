"""The Kafka rights (ACLs) sparkiq needs and the message that names one the brokers refuse.

`Need` is one right sparkiq needs and why; `Refusal` one that the brokers do not grant;
`refusal_message` is the text of the error (`AccessDeniedError`, made by `denied`) that
names each principal, operation, topic or group, Kafka's error code and how to grant it.
Pure: the asking is `sparkiq.kafka.access`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from sparkiq.core.errors import AccessDeniedError
from sparkiq.kafka.security import KafkaSecurity

__all__ = [
    "DENIED_CODE",
    "Need",
    "Operation",
    "Refusal",
    "Resource",
    "denied",
    "principal_of",
    "refusal_message",
]


class Resource(StrEnum):
    """The kinds of Kafka resource sparkiq needs rights on (as `kafka-acls` names them)."""

    TOPIC = "topic"
    GROUP = "group"


class Operation(StrEnum):
    """Kafka ACL operations sparkiq needs. READ and WRITE each imply DESCRIBE (CREATE does not)."""

    READ = "READ"
    WRITE = "WRITE"
    CREATE = "CREATE"
    DESCRIBE = "DESCRIBE"


DENIED_CODE = {
    Resource.TOPIC: "TOPIC_AUTHORIZATION_FAILED",
    Resource.GROUP: "GROUP_AUTHORIZATION_FAILED",
}


@dataclass(frozen=True)
class Need:
    """One right: *operation* on *resource* *name*, which sparkiq needs *for_what*."""

    resource: Resource
    name: str
    operation: Operation
    for_what: str = ""


@dataclass(frozen=True)
class Refusal:
    """A right the brokers do not grant to *principal*."""

    need: Need
    principal: str

    @property
    def code(self) -> str:
        """Kafka's error code for the refused request."""
        return DENIED_CODE[self.need.resource]

    def describe(self) -> str:
        """E.g. "principal User:x may not READ topic t (TOPIC_AUTHORIZATION_FAILED) (...)"."""
        need = self.need
        why = f" (needed to {need.for_what})" if need.for_what else ""
        return (
            f"principal {self.principal} may not {need.operation.value} {need.resource.value} "
            f"{need.name} ({self.code}){why}"
        )

    def grant(self, bootstrap: str) -> str:
        """The `kafka-acls` command an admin runs to grant the right."""
        need = self.need
        principal = self.principal if self.principal.startswith("User:") else "User:<name>"
        return (
            f"kafka-acls.sh --bootstrap-server {bootstrap} --command-config admin.properties "
            f"--add --allow-principal {principal} --operation {need.operation.value.title()} "
            f"--{need.resource.value} {need.name}"
        )


def principal_of(security: KafkaSecurity) -> str:
    """The principal the brokers see for *security*, as far as the settings tell it."""
    username = dict(security.settings).get("sasl.username")
    if security.protocol.startswith("SASL_") and username:
        return f"User:{username}"
    return f"(the principal of {security.summary})"


def refusal_message(refusals: Sequence[Refusal], bootstrap: str, doing: str) -> str:
    """One message for every right refused while *doing* (e.g. "start the serving node")."""
    if not refusals:
        raise ValueError("no refusal to describe")
    first, rest = refusals[0], refusals[1:]
    text = f"cannot {doing}: {first.describe()}"
    if rest:
        text += "; also " + "; ".join(r.describe() for r in rest)
    grants = "; ".join(dict.fromkeys(r.grant(bootstrap) for r in refusals))
    return f"{text}. Ask a Kafka admin to grant {'them' if rest else 'it'}: {grants}"


def denied(
    needs: Sequence[Need], security: KafkaSecurity, bootstrap: str, doing: str
) -> AccessDeniedError:
    """The error for *needs* the brokers refused the principal of *security* while *doing*."""
    principal = principal_of(security)
    return AccessDeniedError(
        refusal_message([Refusal(n, principal) for n in needs], bootstrap, doing)
    )
