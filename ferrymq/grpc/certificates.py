"""The gRPC endpoint's TLS certificate: the broker's own (tlsServerCertPath/KeyPath) when it
has one, else a self-signed one made at start (as Apache's proxy does in its default test
mode): the Java, Go and C# 5.x clients speak TLS by default and accept any certificate. The
broker's own is watched for a renewal on disk (tlsCertReloadIntervalSeconds), as the remoting
ports' is (remoting/cert_reload.py)."""

from __future__ import annotations

import datetime
import ipaddress
import logging
import threading
import time
from pathlib import Path

import grpc

from ferrymq.remoting.cert_reload import FileWatch, describe, read_pair

log = logging.getLogger(__name__)


def server_credentials(cert_path: str, key_path: str, hosts: list[str], reload_interval: float) -> grpc.ServerCredentials:
    """The port's TLS credentials; with files and ``reload_interval`` > 0, a renewal of the
    files is served to new connections (see RenewedCertificates). Blocking (reads files or
    makes a key): run it in a thread."""
    if not (cert_path and key_path):
        cert, key = self_signed(hosts)
        log.info("gRPC TLS: a self-signed certificate made at start (set tlsServerCertPath/KeyPath for yours)")
        return grpc.ssl_server_credentials([(key, cert)])  # nothing on disk to renew
    renewals = RenewedCertificates(cert_path, key_path, reload_interval) if reload_interval > 0 else None
    pair = [(Path(key_path).read_bytes(), Path(cert_path).read_bytes())]  # after the watch began: no renewal missed
    if renewals is None:
        return grpc.ssl_server_credentials(pair)
    return grpc.dynamic_ssl_server_credentials(grpc.ssl_server_certificate_configuration(pair), renewals)


class RenewedCertificates:
    """grpcio's certificate configuration fetcher: grpcio calls it from its own threads before
    each new handshake, so it looks at the files (a stat each) at most once per interval and
    reads them only when they changed. None keeps the configuration in use, which is also
    what a renewal that does not load gets (logged once, retried when the files change again)."""

    def __init__(self, cert_path: str, key_path: str, interval: float) -> None:
        self._cert_path, self._key_path = cert_path, key_path
        self._interval = interval
        self._watch = FileWatch((cert_path, key_path))
        self._next_look = time.monotonic() + interval
        self._lock = threading.Lock()  # concurrent handshakes: one of them looks

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        with self._lock:
            now = time.monotonic()
            if now < self._next_look:
                return None
            self._next_look = now + self._interval
            if not self._watch.changed():
                return None
            try:
                cert, key = read_pair(self._cert_path, self._key_path)
            except (OSError, ValueError) as exc:
                log.warning("gRPC: renewed TLS files not loaded, still serving the previous certificate: %s", exc)
                return None
        log.info("gRPC: TLS certificate reloaded for new connections: %s", describe(cert))
        return grpc.ssl_server_certificate_configuration([(key, cert)])


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
