"""Kafka ACLs for the secured test clusters: grants made through the Admin API.

`Grant` is one ALLOW ACL (a principal, an operation, a topic or group by literal name or
prefix); `create_acls` makes them as an admin (a super user of the cluster, see
`KafkaBroker.super_users`). The rights each sparkiq role needs are in `sparkiq.dev.roles`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin._acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
)
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

from sparkiq.core.errors import KafkaError
from sparkiq.kafka.admin import admin_client
from sparkiq.kafka.rights import Operation, Resource
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity

_RESOURCE_TYPES = {Resource.TOPIC: ResourceType.TOPIC, Resource.GROUP: ResourceType.GROUP}


@dataclass(frozen=True)
class Grant:
    """ALLOW *operation* on *resource* *name* (every name starting with it if *prefixed*)."""

    operation: Operation
    resource: Resource
    name: str
    prefixed: bool = False

    def binding(self, principal: str) -> AclBinding:
        return AclBinding(
            _RESOURCE_TYPES[self.resource],
            self.name,
            ResourcePatternType.PREFIXED if self.prefixed else ResourcePatternType.LITERAL,
            principal,
            "*",
            AclOperation[self.operation.value],
            AclPermissionType.ALLOW,
        )

    def describe(self) -> str:
        pattern = f"{self.name}*" if self.prefixed else self.name
        return f"{self.operation.value} {self.resource.value} {pattern}"


def create_acls(
    bootstrap: str,
    principal: str,
    grants: Iterable[Grant],
    *,
    security: KafkaSecurity = PLAINTEXT,
    timeout_s: float = 10.0,
) -> None:
    """Grant *principal* (e.g. ``User:serving``) every one of *grants*, as *security*'s user."""
    bindings = [g.binding(principal) for g in grants]
    if not bindings:
        return
    admin = admin_client(bootstrap, security=security)
    futures = admin.create_acls(bindings, request_timeout=timeout_s)
    failures = []
    for binding, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            failures.append(f"{binding}: {exc.args[0].str()}")
    del futures
    if failures:
        raise KafkaError(f"cannot create ACLs for {principal}: {'; '.join(failures)}")
    # The controller has them; the broker authorizes with them once it has replayed them,
    # which its DescribeAcls answer (from the broker's authorizer) shows.
    wanted = {str(b) for b in bindings}
    deadline = time.monotonic() + timeout_s
    while True:
        # None matches any name and host (the type stubs say str, the library takes None).
        seen = admin.describe_acls(
            AclBindingFilter(
                ResourceType.ANY,
                None,  # type: ignore[arg-type]
                ResourcePatternType.ANY,
                principal,
                None,  # type: ignore[arg-type]
                AclOperation.ANY,
                AclPermissionType.ANY,
            ),
            request_timeout=timeout_s,
        ).result()
        if wanted <= {str(b) for b in seen}:
            return
        if time.monotonic() > deadline:
            raise KafkaError(f"the ACLs of {principal} did not reach the broker in {timeout_s}s")
        time.sleep(0.05)
