"""The HTTP API of a serving node: routing, parsing, local reads, forwarding, errors, metrics.

serve(view, host, port, settings) -> HttpServer    start in the running loop; .stop()
HttpApi(view, settings).handle(...)                 the interface-free request core
AsgiApp(api)                                        ASGI adapter (tests: httpx.ASGITransport)

The names are loaded when first used, so that importing one module of the package (the
client's `sparkiq.http.tls`, say) does not load the server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkiq.http.app.asgi import AsgiApp
    from sparkiq.http.app.dispatch import HttpApi
    from sparkiq.http.app.server import HttpServer, serve
    from sparkiq.http.settings import HttpSettings

__all__ = ["AsgiApp", "HttpApi", "HttpServer", "HttpSettings", "serve"]

_HOMES = {
    "AsgiApp": "sparkiq.http.app.asgi",
    "HttpApi": "sparkiq.http.app.dispatch",
    "HttpServer": "sparkiq.http.app.server",
    "HttpSettings": "sparkiq.http.settings",
    "serve": "sparkiq.http.app.server",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
