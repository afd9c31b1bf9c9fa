"""The Python client: `Client` routes each key straight to the node that owns it, from the
cluster's metadata, and falls back to the partition's standbys, then to any node.

- `client`: `Client` and its reads, and the credentials it sends;
- `routes`: which node to ask for a key, from `/v1/metadata`;
- `pages`: paged reads (ranges and windows), cursors followed;
- `streams`: watches and change streams, resumed with `Last-Event-ID`.

May import: `sparkiq.core`, and of the HTTP layer only what answers look like
(`sparkiq.http.messages`) and TLS (`sparkiq.http.tls`); no server code.
"""

from sparkiq.client.client import Client, credential_headers

__all__ = ["Client", "credential_headers"]
