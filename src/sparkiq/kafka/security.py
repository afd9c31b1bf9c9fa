"""Kafka client security settings (SASL, SSL): given once, handed to every client sparkiq makes.

The settings are librdkafka properties, the one vocabulary for every client: sparkiq's
librdkafka clients (admin, catalog, restorer, probes, the Spark source and sink) take them
as they are; the serving node's group member (aiokafka) gets them translated
(`KafkaSecurity.aiokafka_kwargs`). Only ``security.protocol``, ``sasl.*``, ``ssl.*`` and
``enable.ssl.certificate.verification`` are accepted, so a settings file cannot override
sparkiq's tuned consumer and producer settings by accident. No settings means PLAINTEXT.

Settings come from ``KEY=VALUE`` pairs (`from_pairs`, the CLI's ``--kafka-property``) or a
Java-style properties file (`from_file`, the CLI's ``--kafka-config``): one ``key=value``
(or ``key: value``) per line, ``#`` and ``!`` start comments; no line continuations.

Secrets (passwords, client secrets, inline private keys) never show in a repr, a message
or a log line: `masked` stands in for them.
"""

from __future__ import annotations

import difflib
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sparkiq.core.errors import ConfigError

__all__ = [
    "ALLOWED_KEYS",
    "PLAINTEXT",
    "KafkaSecurity",
    "is_security_setting",
]

ALLOWED_KEYS: Final = (
    "security.protocol",
    "sasl.*",
    "ssl.*",
    "enable.ssl.certificate.verification",
)
_EXACT = frozenset({"security.protocol", "enable.ssl.certificate.verification"})
_PREFIXES = ("sasl.", "ssl.")
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# The mechanisms the group member (aiokafka) can run from these settings alone.
_AIOKAFKA_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# The keys the aiokafka translation understands; any other one the node cannot honour.
_AIOKAFKA_KEYS = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
        "ssl.cipher.suites",
        "enable.ssl.certificate.verification",
    }
)
_MASK = "***"


def _is_secret(key: str) -> bool:
    return (
        "password" in key
        or "secret" in key
        or key in ("ssl.key.pem", "sasl.oauthbearer.config", "ssl_key")
    )


def _is_allowed(key: str) -> bool:
    return key in _EXACT or key.startswith(_PREFIXES)


def is_security_setting(key: str) -> bool:
    """Whether *key* is one of the librdkafka settings `KafkaSecurity` holds."""
    return _is_allowed(key)


@dataclass(frozen=True, repr=False)
class KafkaSecurity:
    """Validated Kafka client security settings (librdkafka names); empty means PLAINTEXT."""

    settings: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        seen: dict[str, str] = {}
        for key, value in self.settings:
            if not _is_allowed(key):
                hint = difflib.get_close_matches(key, sorted(_AIOKAFKA_KEYS), n=1)
                did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
                raise ConfigError(
                    f"Kafka setting {key!r} is not a security setting{did_you_mean}; only "
                    f"{', '.join(ALLOWED_KEYS)} may be given, so that sparkiq's own client "
                    "settings are not overridden by accident"
                )
            if key in seen:
                raise ConfigError(f"Kafka setting {key!r} is given twice; keep one")
            seen[key] = value
        mechanism, alias = seen.get("sasl.mechanism"), seen.get("sasl.mechanisms")
        if mechanism is not None and alias is not None and mechanism != alias:
            raise ConfigError(
                f"sasl.mechanism ({mechanism!r}) and its alias sasl.mechanisms ({alias!r}) "
                "disagree; give only one"
            )
        protocol = seen.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in _PROTOCOLS:
            raise ConfigError(
                f"security.protocol must be one of {', '.join(_PROTOCOLS)}, got {protocol!r}"
            )
        if protocol.startswith("SASL_") and self.mechanism is None:
            # librdkafka would pick GSSAPI (Kerberos) silently; nobody means that by accident.
            raise ConfigError(
                f"security.protocol={protocol} needs sasl.mechanism: PLAIN, SCRAM-SHA-256 or "
                "SCRAM-SHA-512 (GSSAPI and OAUTHBEARER only on the Spark side)"
            )

    # ---- construction -------------------------------------------------------------------

    @classmethod
    def from_mapping(cls, settings: Mapping[str, str]) -> KafkaSecurity:
        """From librdkafka property names and values (names are trimmed and lower-cased)."""
        pairs = [(str(k).strip().lower(), str(v)) for k, v in settings.items()]
        return cls(tuple(sorted(pairs)))

    @classmethod
    def from_pairs(cls, pairs: Iterable[str]) -> KafkaSecurity:
        """From ``KEY=VALUE`` strings, e.g. the CLI's repeated ``--kafka-property``."""
        out: list[tuple[str, str]] = []
        for item in pairs:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(
                    f"Kafka setting {_mask_pair(item)!r} is not KEY=VALUE, e.g. "
                    "security.protocol=SASL_SSL"
                )
            out.append((key.strip().lower(), value))
        return cls(tuple(sorted(out)))

    @classmethod
    def from_file(cls, path: Path | str) -> KafkaSecurity:
        """From a Java-style properties file: ``key=value`` lines, ``#``/``!`` comments."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"cannot read the Kafka settings file {str(path)!r}: {exc.strerror or exc}"
            ) from exc
        out: list[tuple[str, str]] = []
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.lstrip()
            if not line or line.startswith(("#", "!")):
                continue
            cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
            if cut <= 0:
                raise ConfigError(
                    f"{path}:{number}: not a key=value line; write e.g. security.protocol=SASL_SSL"
                )
            # As in Java properties: blanks around the separator are dropped, a value's
            # trailing blanks are kept (a password may end in one).
            out.append((line[:cut].strip().lower(), line[cut + 1 :].lstrip()))
        try:
            return cls(tuple(sorted(out)))
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None

    @classmethod
    def load(
        cls, config_file: Path | str | None = None, properties: Iterable[str] = ()
    ) -> KafkaSecurity:
        """A settings file (if any), then ``KEY=VALUE`` pairs that override its keys."""
        base = cls.from_file(config_file) if config_file else PLAINTEXT
        return base.merged(cls.from_pairs(properties))

    def merged(self, overrides: KafkaSecurity) -> KafkaSecurity:
        """These settings with *overrides*' keys replacing theirs."""
        if not overrides:
            return self
        combined = dict(self.settings)
        combined.update(overrides.settings)
        return KafkaSecurity(tuple(sorted(combined.items())))

    # ---- views ----------------------------------------------------------------------------

    def __bool__(self) -> bool:
        return bool(self.settings)

    def __repr__(self) -> str:
        return f"KafkaSecurity({self.masked()!r})"

    def __str__(self) -> str:
        return self.summary

    @property
    def protocol(self) -> str:
        """``security.protocol``, upper-cased (PLAINTEXT when not given)."""
        return dict(self.settings).get("security.protocol", "PLAINTEXT").upper()

    @property
    def mechanism(self) -> str | None:
        """``sasl.mechanism`` (or its alias ``sasl.mechanisms``), upper-cased."""
        settings = dict(self.settings)
        value = settings.get("sasl.mechanism") or settings.get("sasl.mechanisms")
        return value.strip().upper() if value else None

    @property
    def summary(self) -> str:
        """How clients connect, without secrets, for messages: e.g. ``SASL_SSL/SCRAM-SHA-512``."""
        mechanism = self.mechanism
        if self.protocol.startswith("SASL_") and mechanism:
            user = dict(self.settings).get("sasl.username")
            who = f" as {user!r}" if user else ""
            return f"security.protocol={self.protocol}, sasl.mechanism={mechanism}{who}"
        return f"security.protocol={self.protocol}"

    def masked(self) -> dict[str, str]:
        """The settings with every secret value replaced by ``***`` (for logs and dumps)."""
        return {k: _MASK if _is_secret(k) else v for k, v in self.settings}

    def librdkafka_conf(self) -> dict[str, str]:
        """The settings for a confluent-kafka client's configuration dict."""
        return dict(self.settings)

    def spark_options(self) -> dict[str, str]:
        """The settings as ``kafka.<name>`` options of the `sparkiq-kafka` source and sink."""
        return {f"kafka.{k}": v for k, v in self.settings}

    # ---- checks and translation -----------------------------------------------------------

    def check(self) -> None:
        """Ask librdkafka whether it takes these settings, without connecting anywhere.

        librdkafka checks names and values and loads the certificate and key files when a
        client is created, so a typo or an unreadable file fails here, at start, with
        librdkafka's own words, instead of as a connection that never comes up.
        """
        if not self:
            return
        from confluent_kafka import KafkaException, Producer

        conf: dict[str, str | int] = {"log_level": 0}
        conf.update(self.librdkafka_conf())
        try:
            Producer(conf)  # no bootstrap.servers: it never connects; dropped at once
        except KafkaException as exc:
            reason = exc.args[0].str() if exc.args else str(exc)
            raise ConfigError(f"librdkafka refuses the Kafka security settings: {reason}") from None

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for an aiokafka client (the serving node's group member).

        ConfigError for what aiokafka cannot do from these settings: GSSAPI, OAUTHBEARER
        (it needs a token provider), PKCS#12 keystores, inline PEM and the other librdkafka
        settings it has no counterpart for; the node must fail at start, not hang later.
        """
        if not self:
            return {}
        settings = dict(self.settings)
        unsupported = sorted(set(settings) - _AIOKAFKA_KEYS)
        if unsupported:
            raise ConfigError(
                f"the serving node's group member (aiokafka) cannot use the Kafka settings "
                f"{unsupported}; it understands {sorted(_AIOKAFKA_KEYS)}"
            )
        protocol = self.protocol
        kwargs: dict[str, Any] = {"security_protocol": protocol}
        if protocol.startswith("SASL_"):
            mechanism = self.mechanism
            if mechanism not in _AIOKAFKA_MECHANISMS:
                raise ConfigError(
                    f"sasl.mechanism={mechanism} cannot be used by the serving node's group "
                    f"member (aiokafka); use one of {', '.join(_AIOKAFKA_MECHANISMS)}"
                )
            username, password = settings.get("sasl.username"), settings.get("sasl.password")
            if not username or password is None:
                raise ConfigError(
                    f"sasl.mechanism={mechanism} needs sasl.username and sasl.password"
                )
            kwargs.update(
                sasl_mechanism=mechanism,
                sasl_plain_username=username,
                sasl_plain_password=password,
            )
        if protocol in ("SSL", "SASL_SSL"):
            kwargs["ssl_context"] = self._ssl_context(settings)
        return kwargs

    @staticmethod
    def _ssl_context(settings: Mapping[str, str]) -> ssl.SSLContext:
        from aiokafka.helpers import create_ssl_context

        ca = settings.get("ssl.ca.location")
        # librdkafka's "probe" means the system's CA store, which is also Python's default.
        cafile = capath = None
        if ca and ca != "probe":
            if Path(ca).is_dir():
                capath = ca
            else:
                cafile = ca
        try:
            context: ssl.SSLContext = create_ssl_context(
                cafile=cafile,
                capath=capath,
                certfile=settings.get("ssl.certificate.location"),
                keyfile=settings.get("ssl.key.location"),
                password=settings.get("ssl.key.password"),
            )
            if ciphers := settings.get("ssl.cipher.suites"):
                context.set_ciphers(ciphers)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"cannot build the TLS context from the ssl.* settings: {exc}; check the "
                "certificate, key and CA files and ssl.key.password"
            ) from None
        algorithm = settings.get("ssl.endpoint.identification.algorithm", "https").lower()
        if algorithm not in ("https", "none"):
            raise ConfigError(
                f"ssl.endpoint.identification.algorithm must be https or none, got {algorithm!r}"
            )
        verify = settings.get("enable.ssl.certificate.verification", "true").lower()
        if verify not in ("true", "false"):
            raise ConfigError(
                f"enable.ssl.certificate.verification must be true or false, got {verify!r}"
            )
        context.check_hostname = algorithm == "https" and verify == "true"
        if verify == "false":
            context.verify_mode = ssl.CERT_NONE
        return context


def _mask_pair(item: str) -> str:
    key, sep, _value = item.partition("=")
    return f"{key}={_MASK}" if sep and _is_secret(key.strip().lower()) else item


PLAINTEXT: Final = KafkaSecurity()
