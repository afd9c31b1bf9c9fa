"""The HTTP API of a serving node: routing, parsing, local reads, forwarding, errors, metrics.

serve(view, host, port, settings) -> HttpServer    start in the running loop; .stop()
HttpApi(view, settings).handle(...)                 the interface-free request core
AsgiApp(api) / RsgiApp(api)                         adapters (tests: httpx.ASGITransport)
"""

from sparkiq.http.api import HttpApi
from sparkiq.http.asgi import AsgiApp
from sparkiq.http.rsgi import RsgiApp
from sparkiq.http.server import HttpServer, Interface, serve
from sparkiq.http.settings import HttpSettings

__all__ = ["AsgiApp", "HttpApi", "HttpServer", "HttpSettings", "Interface", "RsgiApp", "serve"]
