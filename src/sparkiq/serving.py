"""Runs one serving node process: the node, its HTTP API, and a graceful stop on signals.

On SIGTERM or SIGINT the node leaves the consumer group at once (so the others take its
partitions without waiting for a session timeout), then the HTTP server stops accepting and
finishes the requests in flight, and only then restoring stops and the stores are closed.
"""

from __future__ import annotations

import asyncio
import logging
import signal

import uvloop

from sparkiq.http import HttpSettings, serve
from sparkiq.node import Node
from sparkiq.settings import NodeSettings

log = logging.getLogger("sparkiq.serving")


def http_settings(settings: NodeSettings) -> HttpSettings:
    return HttpSettings(
        budget_s=settings.request_budget_s,
        hop_limit=settings.hop_limit,
        max_key_bytes=settings.max_key_bytes,
        max_body_bytes=settings.max_body_bytes,
        standby_max_lag=settings.standby_max_lag,
        active_timeout_s=settings.active_timeout_s,
    )


async def serve_node(settings: NodeSettings, stop: asyncio.Event | None = None) -> None:
    """Run a node until `stop` is set (or a signal arrives, when no event is given)."""
    stop = stop if stop is not None else _signal_event()
    node = Node(settings)
    server = await serve(node, settings.host, settings.port, http_settings(settings))
    log.info("node %s: HTTP API on %s", settings.url, settings.listen)
    background: asyncio.Task[None] | None = None
    try:
        await node.start()
        background = asyncio.create_task(node.run_background())
        await stop.wait()
        log.info("node %s: stopping", settings.url)
    finally:
        if background is not None:
            background.cancel()
        # Leave first (the others take over at once), then let the HTTP server finish the
        # requests in flight, and only then close the stores they read.
        for step in (node.leave, server.stop, node.stop):
            try:
                await step()
            except Exception as exc:
                log.warning("node %s: error while stopping: %r", settings.url, exc)
        log.info("node %s: stopped", settings.url)


def _signal_event() -> asyncio.Event:
    event = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, event.set)
    return event


def run_node(settings: NodeSettings) -> None:
    """Entry point of `sparkiq serve`."""
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    uvloop.run(serve_node(settings))
