"""A node's authentication settings, loaded and checked once at start.

Authentication is on as soon as any credential source is given (an HS256 secret, public
keys, a JWKS file, API keys). A node with none refuses to start unless told `auth="none"`:
serving unauthenticated must be a decision, never a default. With authentication on, the
nodes must share a cluster secret (forwarded requests are signed with it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sparkiq.auth.apikeys import ApiKeys
from sparkiq.auth.cluster import ClusterCredential
from sparkiq.auth.tokens import TokenRules, TokenVerifier, load_public_key
from sparkiq.core.errors import ConfigError

AUTH_NONE = "none"
AUTH_REQUIRED = "required"


@dataclass(frozen=True)
class AuthConfig:
    """What a node checks: token verifier and/or API keys, or nothing (`--auth none`)."""

    tokens: TokenVerifier | None = None
    api_keys: ApiKeys | None = None
    cluster: ClusterCredential | None = None
    # Whether /healthz, /readyz, /metrics and /v1/openapi.json need credentials too.
    protect_ops: bool = False

    @property
    def enabled(self) -> bool:
        return self.tokens is not None or self.api_keys is not None

    @classmethod
    def none(cls, cluster: ClusterCredential | None = None) -> AuthConfig:
        return cls(cluster=cluster)

    @classmethod
    def load(
        cls,
        *,
        auth: str | None,
        jwt_secret_file: Path | None = None,
        jwt_public_key_files: Sequence[Path] = (),
        jwks_file: Path | None = None,
        jwt_audience: str | None = None,
        jwt_issuer: str | None = None,
        jwt_tables_claim: str = "tables",
        api_keys_file: Path | None = None,
        cluster_secret_file: Path | None = None,
        protect_ops: bool = False,
    ) -> AuthConfig:
        """Read every file named; ConfigError on anything that cannot be used."""
        sources = [
            s
            for s in (jwt_secret_file, jwks_file, api_keys_file, *jwt_public_key_files)
            if s is not None
        ]
        cluster = (
            ClusterCredential.from_file(cluster_secret_file)
            if cluster_secret_file is not None
            else None
        )
        if auth is not None and auth not in (AUTH_NONE, AUTH_REQUIRED):
            raise ConfigError(f"auth must be {AUTH_NONE!r} or {AUTH_REQUIRED!r}, got {auth!r}")
        if auth == AUTH_NONE:
            if sources:
                raise ConfigError("auth 'none' was asked for, but credential files are given too")
            return cls.none(cluster)
        if not sources:
            raise ConfigError(
                "no authentication is configured: give a JWT secret, public key, JWKS file "
                "or API keys file, or ask for none explicitly (--auth none)"
            )
        if cluster is None:
            raise ConfigError(
                "with authentication on, nodes must share a cluster secret "
                "(--cluster-secret-file) to sign the requests they forward to each other"
            )
        tokens: TokenVerifier | None = None
        if jwt_secret_file is not None or jwt_public_key_files or jwks_file is not None:
            secret = None
            if jwt_secret_file is not None:
                try:
                    secret = jwt_secret_file.read_bytes().strip()
                except OSError as exc:
                    message = f"cannot read the JWT secret {jwt_secret_file}: {exc}"
                    raise ConfigError(message) from None
            tokens = TokenVerifier(
                secret=secret,
                public_keys=[load_public_key(p) for p in jwt_public_key_files],
                jwks_file=jwks_file,
                rules=TokenRules(
                    audience=jwt_audience, issuer=jwt_issuer, tables_claim=jwt_tables_claim
                ),
            )
        keys = ApiKeys.load(api_keys_file) if api_keys_file is not None else None
        return cls(tokens=tokens, api_keys=keys, cluster=cluster, protect_ops=protect_ops)
