"""The gRPC endpoint's TLS certificate: the broker's own (tlsServerCertPath/KeyPath) when it
has one, else a self-signed one made at start (as Apache's proxy does in its default test
mode): the Java, Go and C# 5.x clients speak TLS by default and accept any certificate."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path


def load_or_make(cert_path: str, key_path: str, hosts: list[str]) -> tuple[bytes, bytes, bool]:
    """(certificate PEM, key PEM, whether it was made here)."""
    if cert_path and key_path:
        return Path(cert_path).read_bytes(), Path(key_path).read_bytes(), False
    cert, key = self_signed(hosts)
    return cert, key, True


def self_signed(hosts: list[str]) -> tuple[bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(["localhost", "127.0.0.1", *hosts]):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ferrymq-grpc")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))
