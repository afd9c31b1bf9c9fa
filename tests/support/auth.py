"""Keys, tokens and certificates made on the spot for the security tests."""

from __future__ import annotations

import datetime as dt
import ipaddress
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

SECRET = b"s" * 40  # HS256 shared secret used by the tests
CLUSTER_SECRET = b"c" * 40


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def hs256(
    tables: object,
    *,
    secret: bytes = SECRET,
    exp_in_s: float = 600,
    sub: str = "alice",
    **claims: Any,
) -> str:
    payload = {"sub": sub, "tables": tables, "exp": int(time.time() + exp_in_s), **claims}
    return jwt.encode(payload, secret, algorithm="HS256")


def signed(
    key: Any, alg: str, tables: object, *, kid: str | None = None, exp_in_s: float = 600
) -> str:
    payload = {"sub": "bob", "tables": tables, "exp": int(time.time() + exp_in_s)}
    headers = {"kid": kid} if kid is not None else None
    return jwt.encode(payload, key, algorithm=alg, headers=headers)


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def public_pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def tamper(token: str) -> str:
    """The token with one character of its payload changed (the signature no longer fits)."""
    head, payload, sig = token.split(".")
    middle = len(payload) // 2
    swapped = "A" if payload[middle] != "A" else "B"
    return ".".join((head, payload[:middle] + swapped + payload[middle + 1 :], sig))


@dataclass(frozen=True)
class Tls:
    ca_file: Path
    cert_file: Path
    key_file: Path


def make_tls(directory: Path) -> Tls:
    """A throwaway CA and a server certificate for 127.0.0.1 and localhost signed by it."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec_key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sparkiq test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return Tls(
        ca_file=write(directory / "ca.pem", ca.public_bytes(pem)),
        cert_file=write(directory / "node.pem", cert.public_bytes(pem)),
        key_file=write(directory / "node.key", key_pem),
    )
