"""The cluster credential: what makes a request one node sends another.

Nodes of one cluster share a secret. A forwarded request carries, in `x-sparkiq-cluster`,
an HMAC-SHA256 of its method, target (path and query) and hop count under that secret; the
receiving node accepts the internal forwarding headers and parameters only when it verifies.
A signature is bound to its request, so one seen on the wire cannot be put on another.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from sparkiq.core.errors import ConfigError

CLUSTER_HEADER = "x-sparkiq-cluster"
_MIN_SECRET_BYTES = 32


class ClusterCredential:
    """Signs and checks node-to-node requests with the cluster secret."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < _MIN_SECRET_BYTES:
            raise ConfigError(f"the cluster secret must be at least {_MIN_SECRET_BYTES} bytes")
        self._secret = secret

    @classmethod
    def from_file(cls, path: Path) -> ClusterCredential:
        try:
            return cls(path.read_bytes().strip())
        except OSError as exc:
            raise ConfigError(f"cannot read the cluster secret {path}: {exc}") from None

    def sign(self, method: str, target: str, hops: int | str) -> str:
        message = f"{method}\n{target}\n{hops}".encode("latin-1", "replace")
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def verify(self, signature: str | None, method: str, target: str, hops: str) -> bool:
        if signature is None:
            return False
        return hmac.compare_digest(signature, self.sign(method, target, hops))
