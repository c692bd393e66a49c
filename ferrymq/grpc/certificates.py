"""The gRPC endpoint's TLS: the broker's own certificate (tlsServerCertPath/KeyPath) when it
has one, else a self-signed one made at start (as Apache's proxy does in its default test
mode): the Java, Go and C# 5.x clients speak TLS by default and accept any certificate. HTTP/2
is offered by ALPN ("h2"), as gRPC clients require. The broker's own files are watched for a
renewal (tlsCertReloadIntervalSeconds), as the remoting ports' are (remoting/cert_reload.py)."""

from __future__ import annotations

import datetime
import ipaddress
import logging
import tempfile
from pathlib import Path

from ferrymq.remoting.tls import ServerTls

log = logging.getLogger(__name__)

ALPN = ("h2",)


def server_tls(mode: str, cert_path: str, key_path: str, hosts: list[str], reload_interval: float) -> ServerTls:
    """The port's TLS (``mode`` permissive or enforcing); with files and ``reload_interval`` > 0
    a renewal of the files reaches new connections (ServerTls.keep_reloading). Blocking (reads
    files or makes a key): run it in a thread."""
    if cert_path and key_path:
        tls = ServerTls.build(mode, cert_path, key_path, reload_interval=reload_interval, alpn=ALPN)
        assert tls is not None  # mode is not disabled
        return tls
    cert, key = self_signed(hosts)
    log.info("gRPC TLS: a self-signed certificate made at start (set tlsServerCertPath/KeyPath for yours)")
    with tempfile.TemporaryDirectory(prefix="ferrymq-grpc-tls-") as scratch:  # read once, then gone
        cert_file, key_file = Path(scratch, "cert.pem"), Path(scratch, "key.pem")
        key_file.touch(mode=0o600)
        key_file.write_bytes(key)
        cert_file.write_bytes(cert)
        tls = ServerTls.build(mode, str(cert_file), str(key_file), alpn=ALPN)  # nothing on disk to renew
    assert tls is not None
    return tls


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
