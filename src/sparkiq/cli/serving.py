"""Runs one serving node process: the node, its HTTP API, and a graceful stop on signals.

On SIGTERM or SIGINT the node leaves the consumer group at once (so the others take its
partitions without waiting for a session timeout), then the HTTP server stops accepting and
finishes the requests in flight, and only then restoring stops and the stores are closed.

`/metrics` carries the HTTP metrics (`sparkiq.http.metrics`) and the node's own
(`sparkiq.node.metrics`); while partitions restore, their progress is shown on stderr
(`sparkiq.node.restore.progress`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

import uvloop

from sparkiq.auth import AuthConfig
from sparkiq.cli.common import reach_brokers
from sparkiq.cli.logs import LogFormat, StatusLineHandler, configure_logging
from sparkiq.core.topology import TopicPartition
from sparkiq.http import HttpSettings
from sparkiq.http.app.server import HttpServer
from sparkiq.http.metrics import HttpMetrics
from sparkiq.http.tls import TlsConfig
from sparkiq.node.metrics import NodeMetrics
from sparkiq.node.node import Node
from sparkiq.node.restore import PartitionStatus
from sparkiq.node.restore.progress import RestoreProgress, report_progress
from sparkiq.node.settings import NodeSettings

log = logging.getLogger("sparkiq.cli.serving")


def http_settings(settings: NodeSettings) -> HttpSettings:
    """The HTTP layer's settings: the node's tunable ones, the rest as fixed in code."""
    return HttpSettings.tuned(settings)


def auth_config(settings: NodeSettings) -> AuthConfig:
    """The node's authentication, its files read and checked (ConfigError if unusable)."""
    return AuthConfig.load(
        auth=settings.auth,
        jwt_secret_file=settings.jwt_secret_file,
        jwt_public_key_files=settings.jwt_public_key_files,
        jwks_file=settings.jwks_file,
        jwt_audience=settings.jwt_audience,
        jwt_issuer=settings.jwt_issuer,
        jwt_tables_claim=settings.jwt_tables_claim,
        api_keys_file=settings.api_keys_file,
        cluster_secret_file=settings.cluster_secret_file,
        protect_ops=settings.protect_ops,
    )


def tls_config(settings: NodeSettings) -> TlsConfig | None:
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return None
    return TlsConfig(settings.tls_cert_file, settings.tls_key_file, settings.tls_ca_file)


async def serve_node(
    settings: NodeSettings,
    stop: asyncio.Event | None = None,
    *,
    status_line: StatusLineHandler | None = None,
) -> None:
    """Run a node until `stop` is set (or a signal arrives, when no event is given).

    With `status_line`, restore progress is a live line on that handler (a terminal);
    otherwise it is logged every 2 s while partitions restore.
    """
    stop = stop if stop is not None else _signal_event()
    auth, tls = auth_config(settings), tls_config(settings)  # fail before anything starts
    node = Node(settings)
    # One node per state dir: a second one fails here, before it listens or joins.
    node.registry.lock()
    progress = RestoreProgress()
    metrics = HttpMetrics(access_log=settings.access_log)
    metrics.registry.register(NodeMetrics(node, progress, group=node.member, stores=node.cleanup))
    server = HttpServer(
        node,
        settings.host,
        settings.port,
        http_settings(settings),
        metrics=metrics,
        auth=auth,
        tls=tls,
    )
    # Maps too big for every member's assignment are served and fetched over HTTP; the
    # server accepts connections before the node joins its group (below).
    node.member.use_exchange(server.api.maps)
    try:
        await server.start()  # a listen address that cannot be used fails here, unjoined
    except BaseException:
        node.registry.unlock()
        raise
    log.info(
        "node %s: HTTP API on %s, advertised as %s", settings.url, settings.listen, settings.url
    )
    background: list[asyncio.Task[None]] = []
    try:
        background.append(asyncio.create_task(_show_progress(node, progress, status_line)))
        await node.start()
        background.append(asyncio.create_task(node.run_background()))
        await stop.wait()
        log.info("node %s: stopping", settings.url)
    finally:
        for task in background:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if status_line is not None:
            status_line.clear_status()
        # Leave first (the others take over at once), then let the HTTP server finish the
        # requests in flight, and only then close the stores they read.
        for step in (node.leave, server.stop, node.stop):
            try:
                await step()
            except Exception as exc:
                log.warning("node %s: error while stopping: %r", settings.url, exc)
        node.registry.unlock()
        log.info("node %s: stopped", settings.url)


async def _show_progress(
    node: Node, progress: RestoreProgress, status_line: StatusLineHandler | None
) -> None:
    def read() -> tuple[dict[TopicPartition, PartitionStatus], int]:
        return node.restorer.statuses(), node.restorer.records_applied

    await report_progress(
        progress,
        read,
        status_line=status_line.set_status if status_line is not None else None,
        clear_status=status_line.clear_status if status_line is not None else None,
    )


def _signal_event() -> asyncio.Event:
    event = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, event.set)
    return event


def run_node(settings: NodeSettings) -> None:
    """Entry point of `sparkiq serve`: brokers that take no connection are said at once."""
    reach_brokers(settings.bootstrap_servers)
    fmt = LogFormat(settings.log_format)
    handler = configure_logging(settings.log_level, fmt, node=settings.url)
    # A live progress line on a terminal; plain log lines every few seconds in files, pipes
    # and JSON logs (`report_progress` without a status line).
    uvloop.run(serve_node(settings, status_line=handler if handler.live else None))
