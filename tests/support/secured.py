"""A secured Apache Kafka for the tests of rights: SCRAM-SHA-512 logins over TLS (SASL_SSL)
and ACLs enforced, with an admin (a super user) who grants the other users their rights.

Each user's client settings are a properties file (what `--kafka-config` and
SPARKIQ_KAFKA_CONFIG take), so no password shows in a child process's command line.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from sparkiq.dev.acls import Grant, create_acls
from sparkiq.dev.kafkabroker import KafkaBroker
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.rights import Need
from sparkiq.kafka.security import KafkaSecurity
from tests.support.auth import make_tls

ADMIN = "admin"
# Every user a test may log in as; each starts with no right at all.
USERS = ("pipeline", "tables", "serving", "reader", "nobody")


def grants_for(needs: Iterable[Need]) -> list[Grant]:
    """The ACLs that grant exactly *needs*."""
    return list(dict.fromkeys(Grant(n.operation, n.resource, n.name) for n in needs))


class SecuredKafka:
    """Apache Kafka with a SASL_SSL listener, ACLs and the users above (started by `start`)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        (directory / "pki").mkdir(parents=True, exist_ok=True)
        self.tls = make_tls(directory / "pki")
        passwords = {name: f"{name}-pw-{i}-secret" for i, name in enumerate((ADMIN, *USERS))}
        self.passwords = passwords
        self.broker = KafkaBroker(
            scram_users=passwords,
            super_users=[ADMIN],
            acls=True,
            tls_cert_file=self.tls.cert_file,
            tls_key_file=self.tls.key_file,
        )

    def start(self) -> SecuredKafka:
        self.broker.start()
        return self

    def stop(self) -> None:
        self.broker.stop()

    @property
    def bootstrap(self) -> str:
        return self.broker.sasl_bootstrap_servers

    def pairs(self, user: str) -> list[str]:
        return [
            f"security.protocol={self.broker.sasl_protocol}",
            "sasl.mechanism=SCRAM-SHA-512",
            f"sasl.username={user}",
            f"sasl.password={self.passwords[user]}",
            f"ssl.ca.location={self.tls.ca_file}",
        ]

    def security(self, user: str) -> KafkaSecurity:
        return KafkaSecurity.from_pairs(self.pairs(user))

    def config_file(self, user: str) -> Path:
        """*user*'s settings as a properties file (for `--kafka-config`)."""
        path = self.directory / f"{user}.properties"
        path.write_text("".join(f"{pair}\n" for pair in self.pairs(user)))
        return path

    def grant(self, user: str, grants: Iterable[Grant]) -> None:
        create_acls(self.bootstrap, f"User:{user}", grants, security=self.security(ADMIN))

    def create_topic(self, name: str, partitions: int) -> None:
        """*name*, made by the admin."""
        create_topic(self.bootstrap, name, partitions, security=self.security(ADMIN))

    def denials(self, user: str) -> list[str]:
        """The operations the broker refused *user*, as its authorizer logged them."""
        text = self.broker.log_paths[0].read_text(errors="replace")
        return [
            line.split("is Denied operation = ", 1)[1]
            for line in text.splitlines()
            if f"Principal = User:{user} is Denied" in line
        ]
