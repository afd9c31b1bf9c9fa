"""TLS for the HTTP API (certificate and key) and for node-to-node forwarding (trusted CAs).

A node given a certificate and key serves HTTPS only (TLS 1.2 or newer); its advertised
URL is then https://. The CA file is what the node trusts when it forwards to other nodes
(default: the system's trust store); clients take the same file (`sparkiq get --ca-file`).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from sparkiq.core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """Certificate and key this node serves with; the CAs it trusts when forwarding."""

    cert_file: Path
    key_file: Path
    ca_file: Path | None = None
    key_password: str | None = None

    def __post_init__(self) -> None:
        for what, path in (("certificate", self.cert_file), ("key", self.key_file)):
            if not path.is_file():
                raise ConfigError(f"TLS {what} file {path} does not exist")
        if self.ca_file is not None and not self.ca_file.is_file():
            raise ConfigError(f"TLS CA file {self.ca_file} does not exist")
        try:  # fail at start, not on the first connection
            self.server_context()
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"cannot use TLS certificate {self.cert_file}: {exc}") from None

    def server_context(self) -> ssl.SSLContext:
        """What the node serves HTTPS with (TLS 1.2 or newer)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file, self.key_password)
        return context

    def client_context(self) -> ssl.SSLContext:
        """What forwarding verifies other nodes with."""
        return client_context(self.ca_file)


def client_context(ca_file: Path | None) -> ssl.SSLContext:
    """A verifying client context trusting `ca_file` (None: the system's trust store)."""
    try:
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"cannot load CA file {ca_file}: {exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
