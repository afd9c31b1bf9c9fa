"""sparkiq: the state of PySpark streaming pipelines, queryable by key from any node.

`sparkiq.Client` is the Python client (`sparkiq.client.Client`); it is loaded when first
used, so `import sparkiq` (which every module of the package does) stays light.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"
__all__ = ["Client", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Client":
        return import_module("sparkiq.client").Client
    raise AttributeError(f"module 'sparkiq' has no attribute {name!r}")
