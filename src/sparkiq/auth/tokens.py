"""Bearer JWTs: HS256 with a shared secret, RS256/ES256 with public keys or a JWKS file.

PyJWT does the cryptography and the standard claim checks (exp required, nbf, iat, aud,
iss). The algorithm of a token decides which keys may check it, never the other way round:
an HS256 token is checked against the shared secret only, an RS256 one against RSA public
keys only, an ES256 one against P-256 keys only, so a public key can never be used as an
HMAC secret. A JWKS file picks its key by the token's `kid`; it is re-read when it changes
on disk (key rotation without a restart).

A verified token is remembered until it expires: a node checks the same token on every
request of a client, and a forwarded request is checked again by its owner. The cache only
saves the signature check; expiry is checked on every use.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from sparkiq.auth.identity import Identity, parse_tables
from sparkiq.core.errors import ConfigError

HS256, RS256, ES256 = "HS256", "RS256", "ES256"
_CACHE_MAX = 10_000


class TokenError(Exception):
    """The token cannot be accepted; the message says why (safe to show the caller)."""


@dataclass(frozen=True, slots=True)
class TokenRules:
    """What a token must satisfy besides its signature."""

    audience: str | None = None
    issuer: str | None = None
    tables_claim: str = "tables"
    leeway_s: float = 0.0


def load_public_key(path: Path) -> tuple[str, Any]:
    """An RSA (RS256) or P-256 EC (ES256) public key from a PEM file: (algorithm, key)."""
    try:
        key = load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read a PEM public key from {path}: {exc}") from None
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < 2048:
            raise ConfigError(f"{path}: RSA keys must have at least 2048 bits")
        return RS256, key
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return ES256, key
    raise ConfigError(f"{path}: only RSA (RS256) and P-256 EC (ES256) public keys are supported")


class _Jwks:
    """A JWKS file, re-read when its modification time or size changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._keys: dict[str | None, jwt.PyJWK] = {}
        self._reload(strict=True)

    def _reload(self, *, strict: bool) -> None:
        try:
            stat = os.stat(self.path)
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp == self._stamp:
                return
            keyset = jwt.PyJWKSet.from_json(self.path.read_text())
        except (OSError, jwt.PyJWKError, jwt.PyJWKSetError, ValueError) as exc:
            if strict:
                raise ConfigError(f"cannot load the JWKS file {self.path}: {exc}") from None
            return  # keep the keys we have; a half-written file is retried next time
        keys: dict[str | None, jwt.PyJWK] = {}
        for key in keyset.keys:
            if key.algorithm_name in (RS256, ES256):
                keys[key.key_id] = key
        self._stamp = stamp
        self._keys = keys

    def find(self, kid: str | None, alg: str) -> list[Any]:
        self._reload(strict=False)
        if kid is not None:
            key = self._keys.get(kid)
            return [key.key] if key is not None and key.algorithm_name == alg else []
        return [k.key for k in self._keys.values() if k.algorithm_name == alg]


class TokenVerifier:
    """Checks bearer JWTs and turns them into `Identity` values."""

    def __init__(
        self,
        *,
        secret: bytes | None = None,
        public_keys: Sequence[tuple[str, Any]] = (),
        jwks_file: Path | None = None,
        rules: TokenRules | None = None,
    ) -> None:
        if secret is not None and len(secret) < 32:
            raise ConfigError("the HS256 secret must be at least 32 bytes")
        self._secret = secret
        self._public = list(public_keys)
        self._jwks = _Jwks(jwks_file) if jwks_file is not None else None
        self.rules = rules or TokenRules()
        self._cache: dict[str, tuple[Identity, float]] = {}

    def verify(self, token: str) -> Identity:
        """The caller a token names; TokenError when it cannot be accepted."""
        cached = self._cache.get(token)
        if cached is not None:
            identity, expires = cached
            if time.time() < expires + self.rules.leeway_s:
                return identity
            del self._cache[token]
            raise TokenError("the token has expired")
        identity, expires = self._check(token)
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        self._cache[token] = (identity, expires)
        return identity

    def _check(self, token: str) -> tuple[Identity, float]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise TokenError("the token is not a well-formed JWT") from None
        alg = str(header.get("alg"))
        keys = self._keys_for(alg, header.get("kid"))
        if not keys:
            raise TokenError(f"no key of this node accepts tokens signed with {alg!r}")
        rules = self.rules
        claims: dict[str, Any] | None = None
        error: jwt.InvalidTokenError | None = None
        for key in keys:
            try:
                claims = jwt.decode(
                    token,
                    key,
                    algorithms=[alg],
                    audience=rules.audience,
                    issuer=rules.issuer,
                    leeway=rules.leeway_s,
                    options={"require": ["exp"], "verify_aud": rules.audience is not None},
                )
                break
            except jwt.InvalidSignatureError as exc:
                error = exc  # another key may match
            except jwt.ExpiredSignatureError:
                raise TokenError("the token has expired") from None
            except jwt.InvalidTokenError as exc:
                raise TokenError(f"the token is not valid: {exc}") from None
        if claims is None:
            raise TokenError(f"the token's signature does not verify ({error})")
        try:
            claim = rules.tables_claim
            tables = parse_tables(claims.get(claim, []), f"claim {claim!r}")
        except ValueError as exc:
            raise TokenError(str(exc)) from None
        subject = str(claims.get("sub", "unknown"))
        return Identity(subject, tables, "jwt"), float(claims["exp"])

    def _keys_for(self, alg: str, kid: object) -> list[Any]:
        if alg == HS256:
            return [self._secret] if self._secret is not None else []
        if alg not in (RS256, ES256):
            return []
        keys = [key for key_alg, key in self._public if key_alg == alg]
        if self._jwks is not None:
            keys += self._jwks.find(kid if isinstance(kid, str) else None, alg)
        return keys
