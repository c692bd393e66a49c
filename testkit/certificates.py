"""Throw-away TLS material for tests: a CA and the certificates it signs (the TLS tests of the
broker, the name server, the gRPC port and the kind e2e's cert-manager-free Secrets), and a
Secret volume laid out as the kubelet lays it out, for the certificate renewal tests."""

from __future__ import annotations

from pathlib import Path


def make_test_certificates(directory: Path) -> dict[str, str]:
    """A throw-away CA, a server certificate for 127.0.0.1/localhost and a client
    certificate, all signed by the CA; PEM file paths by name (ca, server_cert,
    server_key, client_cert, client_key)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)

    def issue(name: str, issuer_name, issuer_key, *, ca: bool = False, sans=None):
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name or subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(issuer_key or key, hashes.SHA256())
        return cert, key

    def write(name: str, cert, key) -> None:
        (directory / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (directory / f"{name}.key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))

    ca_cert, ca_key = issue("FerryMQ test CA", None, None, ca=True)
    server_cert, server_key = issue("127.0.0.1", ca_cert.subject, ca_key, sans=[
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    client_cert, client_key = issue("ferrymq-test-client", ca_cert.subject, ca_key)
    write("ca", ca_cert, ca_key)
    write("server", server_cert, server_key)
    write("client", client_cert, client_key)
    return {"ca": str(directory / "ca.crt"), "server_cert": str(directory / "server.crt"),
            "server_key": str(directory / "server.key"), "client_cert": str(directory / "client.crt"),
            "client_key": str(directory / "client.key")}


def tls_secret(certs: dict[str, str], key_of: dict[str, str] | None = None) -> dict[str, str]:
    """A kubernetes.io/tls Secret's files for SecretVolume.publish: ``certs``' server
    certificate and ``key_of``'s key (``certs``' own unless given: a mismatch on purpose)."""
    return {"tls.crt": certs["server_cert"], "tls.key": (key_of or certs)["server_key"]}


class SecretVolume:
    """Files laid out as the kubelet lays out a Kubernetes Secret volume: each version of the
    Secret in its own directory, a ``..data`` symlink to the current one and each file a
    symlink through ``..data``. ``publish`` swaps ``..data`` in one rename, as the kubelet does
    when cert-manager updates the Secret, so a reader sees the old files or the new ones."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._versions = 0
        root.mkdir(parents=True, exist_ok=True)

    def path(self, name: str) -> str:
        return str(self.root / name)

    def publish(self, files: dict[str, str]) -> None:
        """Make ``files`` (the volume's file name: the file whose bytes it gets) current."""
        self._versions += 1
        version = self.root / f"..version-{self._versions}"
        version.mkdir()
        for name, source in files.items():
            (version / name).write_bytes(Path(source).read_bytes())
        swap = self.root / "..data_tmp"
        swap.symlink_to(version.name)
        swap.replace(self.root / "..data")
        for name in files:
            link = self.root / name
            if not link.is_symlink():
                link.symlink_to(Path("..data") / name)
