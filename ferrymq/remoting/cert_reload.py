"""Certificates renewed on disk served without a restart (issue 34).

cert-manager renews a certificate by updating its Secret; the kubelet writes the new files
into a new directory of the Secret volume and swaps the volume's ``..data`` symlink to it.
So the files are watched by what the paths lead to now (``os.stat`` follows symlinks): a
new inode, mtime or size is a change. A change is loaded and checked before it is served;
a renewal that does not load (a key not matching its certificate, a file half written) is
logged once and the previous certificate stays served until the files change again.

The remoting servers (broker, name server, controller) reload through ServerTls.keep_reloading
(remoting/tls.py); the gRPC port asks :class:`FileWatch` and :func:`read_pair` from grpcio's
threads (grpc/certificates.py).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["FileWatch", "describe", "read_pair"]

FileIdentity = tuple[int, int, int] | None  # (inode, mtime in ns, size); None: not readable now


def _identity(path: str) -> FileIdentity:
    try:
        st = os.stat(path)  # follows symlinks: a swapped ..data gives the new file's inode
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class FileWatch:
    """Tells whether any of some files changed since the last look (the first look is the
    state when the watch was made: the files the server started with)."""

    def __init__(self, paths: tuple[str, ...]) -> None:
        self._paths = paths
        self._seen = self._look()

    def _look(self) -> tuple[FileIdentity, ...]:
        return tuple(_identity(path) for path in self._paths)

    def changed(self) -> bool:
        now = self._look()
        if now == self._seen:
            return False
        self._seen = now  # taken before the files are read: a change after that is seen next time
        return True


def describe(cert_pem: bytes) -> str:
    """Subject, serial and expiry of the first certificate of a PEM chain, for the log."""
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(cert_pem)
    return (f"subject {cert.subject.rfc4514_string()}, serial {cert.serial_number:x}, "
            f"valid until {cert.not_valid_after_utc:%Y-%m-%d %H:%M:%S} UTC")


def read_pair(cert_file: str, key_file: str) -> tuple[bytes, bytes]:
    """The PEM certificate chain and key, read once; ValueError unless both parse and the key
    is the certificate's (what an SSL context would refuse, checked on the very bytes served)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert_pem, key_pem = Path(cert_file).read_bytes(), Path(key_file).read_bytes()
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except TypeError:  # an encrypted key: the servers take no password
        raise ValueError("the key is encrypted") from None
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != cert.public_key().public_bytes(*spki):
        raise ValueError("the key does not match the certificate")
    return cert_pem, key_pem
