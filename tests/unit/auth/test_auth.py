"""The auth package alone: tokens, JWKS, API keys, cluster signatures, configuration rules."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import jwt
import pytest

from sparkiq.auth import AuthConfig, Authenticator, ClusterCredential, Identity
from sparkiq.auth.apikeys import ApiKeys, digest
from sparkiq.auth.tokens import TokenError, TokenRules, TokenVerifier, load_public_key
from sparkiq.core.errors import ConfigError
from tests.support.auth import (
    CLUSTER_SECRET,
    SECRET,
    ec_key,
    hs256,
    public_pem,
    rsa_key,
    signed,
    tamper,
    write,
)


def test_hs256_token_names_its_tables() -> None:
    verifier = TokenVerifier(secret=SECRET)
    identity = verifier.verify(hs256(["rewards", "orders"]))
    assert identity == Identity("alice", frozenset({"rewards", "orders"}), "jwt")
    assert identity.may_read("rewards")
    assert not identity.may_read("payments")


@pytest.mark.parametrize("grant", ["*", ["*"], ["a", "*"]])
def test_star_grants_every_table(grant: object) -> None:
    identity = TokenVerifier(secret=SECRET).verify(hs256(grant))
    assert identity.tables is None
    assert identity.may_read("anything")


def test_a_token_without_the_tables_claim_reads_nothing() -> None:
    token = jwt.encode({"sub": "x", "exp": int(time.time()) + 60}, SECRET, algorithm="HS256")
    assert not TokenVerifier(secret=SECRET).verify(token).may_read("rewards")


# The tokens are made when the test runs, not when pytest collects it: the end-to-end
# tests run between the two for longer than a token lives.
@pytest.mark.parametrize(
    ("make_token", "why"),
    [
        (lambda: hs256(["t"], exp_in_s=-10), "expired"),
        (lambda: tamper(hs256(["t"])), "signature"),
        (lambda: hs256(["t"], secret=b"x" * 40), "signature"),
        (lambda: "not-a-token", "well-formed"),
        (lambda: jwt.encode({"sub": "x", "tables": ["t"]}, SECRET, algorithm="HS256"), "exp"),
        (lambda: hs256(7), "list of table names"),
    ],
)
def test_bad_tokens_are_refused_with_a_reason(make_token: Callable[[], str], why: str) -> None:
    with pytest.raises(TokenError, match=why):
        TokenVerifier(secret=SECRET).verify(make_token())


def test_a_cached_token_still_expires() -> None:
    verifier = TokenVerifier(secret=SECRET)
    token = hs256(["t"], exp_in_s=1.2)
    assert verifier.verify(token).may_read("t")
    time.sleep(1.3)
    with pytest.raises(TokenError, match="expired"):
        verifier.verify(token)


def test_audience_and_issuer_are_checked() -> None:
    verifier = TokenVerifier(secret=SECRET, rules=TokenRules(audience="iq", issuer="idp"))
    assert verifier.verify(hs256(["t"], aud="iq", iss="idp")).may_read("t")
    with pytest.raises(TokenError, match=r"(?i)audience"):
        verifier.verify(hs256(["t"], aud="other", iss="idp"))
    with pytest.raises(TokenError, match=r"(?i)issuer"):
        verifier.verify(hs256(["t"], aud="iq", iss="someone"))


def test_rs256_and_es256_with_pem_public_keys(tmp_path: Path) -> None:
    rsa_priv, ec_priv = rsa_key(), ec_key()
    keys = [
        load_public_key(write(tmp_path / "rsa.pem", public_pem(rsa_priv))),
        load_public_key(write(tmp_path / "ec.pem", public_pem(ec_priv))),
    ]
    assert [alg for alg, _ in keys] == ["RS256", "ES256"]
    verifier = TokenVerifier(public_keys=keys)
    assert verifier.verify(signed(rsa_priv, "RS256", ["t"])).may_read("t")
    assert verifier.verify(signed(ec_priv, "ES256", ["u"])).may_read("u")
    with pytest.raises(TokenError, match="signature"):
        verifier.verify(signed(rsa_key(), "RS256", ["t"]))  # another key
    # No HS256 secret configured: HS256 tokens are refused, whatever they are signed with.
    with pytest.raises(TokenError, match="HS256"):
        verifier.verify(hs256(["t"]))


def test_a_public_key_is_never_used_as_an_hmac_secret(tmp_path: Path) -> None:
    """The classic algorithm confusion: an HS256 token 'signed' with the public key PEM."""
    priv = rsa_key()
    pem = public_pem(priv)
    verifier = TokenVerifier(public_keys=[load_public_key(write(tmp_path / "k.pem", pem))])
    forged = jwt.api_jws.PyJWS()
    header_alg = "HS256"
    import hmac as hmac_mod

    def b64(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    head = b64(json.dumps({"alg": header_alg, "typ": "JWT"}).encode())
    body = b64(json.dumps({"sub": "eve", "tables": "*", "exp": int(time.time()) + 60}).encode())
    sig = b64(hmac_mod.new(pem, head + b"." + body, hashlib.sha256).digest())
    assert forged is not None
    with pytest.raises(TokenError):
        verifier.verify((head + b"." + body + b"." + sig).decode())


def test_jwks_file_picks_by_kid_and_follows_rotation(tmp_path: Path) -> None:
    first, second = rsa_key(), ec_key()

    def jwk(key: object, kid: str, alg: str) -> dict[str, object]:
        algo = jwt.get_algorithm_by_name(alg)
        out: dict[str, object] = json.loads(algo.to_jwk(key.public_key()))  # type: ignore[attr-defined]
        return {**out, "kid": kid, "alg": alg, "use": "sig"}

    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk(first, "k1", "RS256")]}))
    verifier = TokenVerifier(jwks_file=path)
    assert verifier.verify(signed(first, "RS256", ["t"], kid="k1")).may_read("t")
    with pytest.raises(TokenError):
        verifier.verify(signed(second, "ES256", ["t"], kid="k2"))
    # Rotation: k2 added, k1 removed; the file is re-read without a restart.
    path.write_text(json.dumps({"keys": [jwk(second, "k2", "ES256")]}))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000_000))
    assert verifier.verify(signed(second, "ES256", ["u"], kid="k2")).may_read("u")
    with pytest.raises(TokenError):
        verifier.verify(signed(first, "RS256", ["t"], kid="k1", exp_in_s=900))


def test_api_keys_file(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text(
        json.dumps(
            {
                "keys": [
                    {"name": "dash", "sha256": digest("dashboard-key-0001"), "tables": ["r"]},
                    {"name": "ops", "key": "operations-key-0002", "tables": "*"},
                ]
            }
        )
    )
    keys = ApiKeys.load(path)
    assert keys.find("dashboard-key-0001") == Identity("dash", frozenset({"r"}), "api-key")
    assert keys.find("operations-key-0002") == Identity("ops", None, "api-key")
    assert keys.find("guess") is None


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        ({"nope": []}, "keys"),
        ({"keys": [{"name": "a", "key": "short", "tables": "*"}]}, "at least"),
        ({"keys": [{"name": "a", "key": "long-enough-key-123"}]}, "tables"),
        ({"keys": [{"name": "a", "sha256": "zz", "tables": "*"}]}, "64 hex"),
        ({"keys": [{"name": "a", "key": "long-enough-key-123", "tables": 3}]}, "list of table"),
    ],
)
def test_bad_api_keys_files_are_refused(tmp_path: Path, doc: object, why: str) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=why):
        ApiKeys.load(path)


def test_cluster_signature_is_bound_to_its_request() -> None:
    cred = ClusterCredential(CLUSTER_SECRET)
    sig = cred.sign("GET", "/v1/tables/t/keys/a", 1)
    assert cred.verify(sig, "GET", "/v1/tables/t/keys/a", "1")
    assert not cred.verify(sig, "GET", "/v1/tables/t/keys/b", "1")
    assert not cred.verify(sig, "GET", "/v1/tables/t/keys/a", "2")
    assert not cred.verify(None, "GET", "/v1/tables/t/keys/a", "1")
    assert not ClusterCredential(b"d" * 40).verify(sig, "GET", "/v1/tables/t/keys/a", "1")
    with pytest.raises(ConfigError, match="32 bytes"):
        ClusterCredential(b"short")


def test_config_rules(tmp_path: Path) -> None:
    secret = write(tmp_path / "jwt", SECRET)
    cluster = write(tmp_path / "cluster", CLUSTER_SECRET)
    with pytest.raises(ConfigError, match="--auth none"):
        AuthConfig.load(auth=None)
    with pytest.raises(ConfigError, match="cluster secret"):
        AuthConfig.load(auth=None, jwt_secret_file=secret)
    with pytest.raises(ConfigError, match="credential files are given"):
        AuthConfig.load(auth="none", jwt_secret_file=secret)
    with pytest.raises(ConfigError, match="at least 32"):
        AuthConfig.load(
            auth=None, jwt_secret_file=write(tmp_path / "s", b"short"), cluster_secret_file=cluster
        )
    assert not AuthConfig.load(auth="none").enabled
    config = AuthConfig.load(auth=None, jwt_secret_file=secret, cluster_secret_file=cluster)
    assert config.enabled
    assert config.cluster is not None


def test_authenticator_reasons(tmp_path: Path) -> None:
    config = AuthConfig.load(
        auth="required",
        jwt_secret_file=write(tmp_path / "jwt", SECRET),
        cluster_secret_file=write(tmp_path / "cluster", CLUSTER_SECRET),
    )
    auth = Authenticator(config)
    assert "credentials required" in str(auth.authenticate(None, None))
    assert "Bearer" in str(auth.authenticate("Basic abc", None))
    assert "API keys" in str(auth.authenticate(None, "some-api-key-value"))
    found = auth.authenticate(f"Bearer {hs256(['t'])}", None)
    assert isinstance(found, Identity)
    assert found.may_read("t")
