"""Turns a request's credentials into an `Identity`, or says why not (for the 401)."""

from __future__ import annotations

from sparkiq.auth.config import AuthConfig
from sparkiq.auth.identity import EVERYONE, Identity
from sparkiq.auth.tokens import TokenError


class Authenticator:
    """Checks credentials against a node's `AuthConfig`."""

    def __init__(self, config: AuthConfig) -> None:
        self.config = config
        self.enabled = config.enabled
        self._tokens = config.tokens
        self._keys = config.api_keys

    def authenticate(self, authorization: str | None, api_key: str | None) -> Identity | str:
        """The caller, or the reason its credentials are refused (a message for the 401)."""
        if not self.enabled:
            return EVERYONE
        if api_key is not None:
            if self._keys is None:
                return "this node does not accept API keys"
            identity = self._keys.find(api_key)
            return identity if identity is not None else "unknown API key"
        if authorization is None:
            return "credentials required: an Authorization: Bearer token or an X-API-Key"
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return "the Authorization header must be 'Bearer <token>'"
        if self._tokens is None:
            return "this node does not accept bearer tokens"
        try:
            return self._tokens.verify(token.strip())
        except TokenError as exc:
            return str(exc)
