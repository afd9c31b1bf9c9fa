"""Options shared by the `sparkiq-kafka` source and sink: the broker and librdkafka settings."""

from __future__ import annotations

from collections.abc import Mapping

from sparkiq.core.errors import ConfigError

FORMAT_NAME = "sparkiq-kafka"


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """Spark hands options over case-insensitively; compare them lower-cased."""
    return {k.lower(): v for k, v in options.items()}


def bootstrap_servers(opts: Mapping[str, str], doing: str) -> str:
    """The `bootstrap.servers` (or Spark-style `kafka.bootstrap.servers`) option."""
    bootstrap = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise ConfigError(
            f"{doing} needs the option bootstrap.servers, e.g. "
            ".option('bootstrap.servers', '127.0.0.1:9092')"
        )
    return bootstrap


def librdkafka_settings(opts: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Options named `kafka.<setting>`, passed to librdkafka as `<setting>` (as in Spark)."""
    return tuple(
        sorted(
            (k.removeprefix("kafka."), v)
            for k, v in opts.items()
            if k.startswith("kafka.") and k != "kafka.bootstrap.servers"
        )
    )


def milliseconds_as_s(opts: Mapping[str, str], name: str, default_ms: int) -> float:
    """The option *name* (lower-cased, in ms) in seconds."""
    try:
        return float(opts.get(name.lower(), str(default_ms))) / 1000.0
    except ValueError as exc:
        raise ConfigError(f"{name} must be a number of milliseconds") from exc


def positive_int(opts: Mapping[str, str], name: str, default: int, hint: str = "") -> int:
    """The option *name* (lower-cased) as an integer of at least 1; *hint* explains it."""
    raw = opts.get(name.lower(), str(default))
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{name} must be a positive integer{hint}, got {raw!r}")
    return value
