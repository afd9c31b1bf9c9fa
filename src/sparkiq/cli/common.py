"""What the commands share: their common options, Kafka security, and how a command runs.

An option that names a place (bootstrap servers, app id, node URL) or a credential also reads
an environment variable, shown in `--help`; `--bootstrap-servers`, `--app` and
`--kafka-config` are made from the fields of `NodeSettings` (`sparkiq.cli.options`).
`run_command` turns a `SparkiqError` into a message and exit status 2.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from sparkiq.cli.options import field_option
from sparkiq.core.errors import BadNodeUrl, NodesUnreachable, SparkiqError
from sparkiq.node.settings import NodeSettings

if TYPE_CHECKING:
    from sparkiq.kafka.security import KafkaSecurity

_F = TypeVar("_F", bound=Callable[..., Any])

# The node a client command asks when neither --url nor SPARKIQ_URL says another.
_DEFAULT_URL = "http://127.0.0.1:8100"


def env_option(*names: str, envvar: str, help: str, **kwargs: Any) -> Callable[[_F], _F]:
    """An option that also reads environment variable *envvar* (shown in --help)."""
    option: Callable[[_F], _F] = click.option(
        *names, envvar=envvar, show_envvar=True, help=help, **kwargs
    )
    return option


def file_option(*names: str, envvar: str, help: str, **kwargs: Any) -> Callable[[_F], _F]:
    """An `env_option` naming an existing file, given as a Path (None when absent)."""
    kwargs.setdefault("default", None)
    return env_option(
        *names,
        envvar=envvar,
        type=click.Path(dir_okay=False, exists=True, path_type=Path),
        help=help,
        **kwargs,
    )


def bootstrap_option() -> Callable[[_F], _F]:
    # Required on the command line: a node or command pointed at a local broker by default
    # would fail far from the cause (code and tests may rely on the model's default).
    return field_option(NodeSettings, "bootstrap_servers", required=True)


def app_option() -> Callable[[_F], _F]:
    return field_option(NodeSettings, "app")


def kafka_security_options(command: _F) -> _F:
    """--kafka-config and --kafka-property: SASL/SSL settings of every Kafka client."""
    for option in (
        click.option(
            "--kafka-property",
            "kafka_properties",
            multiple=True,
            metavar="KEY=VALUE",
            help="Kafka client security setting (librdkafka name: security.protocol, sasl.*, "
            "ssl.*), overriding --kafka-config (repeatable). Put passwords in the file: a "
            "command line is visible to every user of the machine.",
        ),
        # The field holds the loaded settings; the option names their file (None: the
        # field's default, PLAINTEXT), merged with --kafka-property by `kafka_security`.
        field_option(
            NodeSettings,
            "kafka_config",
            click_type=click.Path(dir_okay=False, exists=True, path_type=Path),
            default=None,
        ),
    ):
        command = option(command)
    return command


def kafka_security(kafka_config: Path | None, kafka_properties: tuple[str, ...]) -> KafkaSecurity:
    """The `KafkaSecurity` of the two options above, checked by librdkafka at once."""
    from sparkiq.kafka.security import KafkaSecurity

    try:
        security = KafkaSecurity.load(kafka_config, kafka_properties)
        security.check()
    except SparkiqError as exc:
        raise click.UsageError(str(exc)) from None
    return security


def reach_brokers(bootstrap_servers: str) -> None:
    """Fail within seconds, with one message, when no bootstrap server accepts a connection
    (a Kafka client would retry for its whole timeout); a `SparkiqError` for `run_command`."""
    from sparkiq.kafka.reach import check_reachable

    check_reachable(bootstrap_servers)


def url_option() -> Callable[[_F], _F]:
    return env_option(
        "--url",
        "urls",
        envvar="SPARKIQ_URL",
        multiple=True,
        default=[_DEFAULT_URL],
        show_default=True,
        help="URL of any serving node (repeatable).",
    )


def credential_options(command: _F) -> _F:
    """--token, --api-key and --ca-file: how a client command reaches secured nodes."""
    for option in (
        file_option(
            "--ca-file",
            envvar="SPARKIQ_CA_FILE",
            help="CA certificate(s) to check https:// nodes against [default: the system's].",
        ),
        env_option("--api-key", envvar="SPARKIQ_API_KEY", default=None, help="API key to send."),
        env_option(
            "--token", envvar="SPARKIQ_TOKEN", default=None, help="Bearer token (JWT) to send."
        ),
    ):
        command = option(command)
    return command


def run_command(fn: Any) -> None:
    """Call `fn`: a `SparkiqError` exits with status 2 and its message, Ctrl-C with 130.

    A node URL that is malformed or that no node answers at is said with where the URL
    came from (`--url`, `SPARKIQ_URL` or the default) and how to give another.
    """
    try:
        fn()
    except BadNodeUrl as exc:
        click.echo(f"sparkiq: {exc} ({_url_source()})", err=True)
        sys.exit(2)
    except NodesUnreachable as exc:
        click.echo(f"sparkiq: {exc}; {_where_urls_come_from()}", err=True)
        sys.exit(2)
    except SparkiqError as exc:
        click.echo(f"sparkiq: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


def _url_source() -> str:
    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source("urls") if ctx is not None else None
    if source is click.core.ParameterSource.ENVIRONMENT:
        return "set by SPARKIQ_URL"
    return "given with --url"


def _where_urls_come_from() -> str:
    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source("urls") if ctx is not None else None
    if source is click.core.ParameterSource.DEFAULT:
        return (
            f"no --url was given, so {_DEFAULT_URL} was asked: give a running node's URL "
            "with --url or SPARKIQ_URL"
        )
    if source is click.core.ParameterSource.ENVIRONMENT:
        return "the URL came from SPARKIQ_URL: set it to a running node's URL, or give --url"
    return "give a running node's URL with --url (or SPARKIQ_URL)"


def wait_for_signal() -> None:
    """Block until SIGTERM or Ctrl-C."""
    stop = False

    def handler(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, handler)
    try:
        while not stop:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
