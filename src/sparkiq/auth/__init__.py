"""Who is asking, and what they may read: authentication and per-table authorization.

A node checks every request's credentials (`Authenticator`): a bearer JWT (HS256 with a
shared secret, RS256/ES256 with public keys or a JWKS file) or a static API key. The
`Identity` it yields names the tables the caller may read. Requests between nodes carry the
caller's own credentials (the owner checks them again) and are signed with the cluster
credential (`ClusterCredential`), so only a node of the cluster can send the internal
forwarding headers.
"""

from sparkiq.auth.authenticator import Authenticator
from sparkiq.auth.cluster import ClusterCredential
from sparkiq.auth.config import AuthConfig
from sparkiq.auth.identity import EVERYONE, Identity

__all__ = ["EVERYONE", "AuthConfig", "Authenticator", "ClusterCredential", "Identity"]
