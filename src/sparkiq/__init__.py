"""sparkiq: the state of PySpark streaming pipelines, queryable by key from any node.

`sparkiq.Client` is the Python client (`sparkiq.client.Client`); it is loaded when first
used, so `import sparkiq` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkiq.client import Client

__version__ = "0.1.0"
__all__ = ["Client", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Client":
        from sparkiq.client import Client

        return Client
    raise AttributeError(f"module 'sparkiq' has no attribute {name!r}")
