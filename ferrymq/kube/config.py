"""Where the Kubernetes API server is and how to authenticate to it.

Two sources, as client-go's: inside a pod, the service account (``KUBERNETES_SERVICE_HOST`` and
``_PORT``, the token, CA and namespace files under /var/run/secrets/kubernetes.io/serviceaccount);
outside, a kubeconfig file (its current context, or a named one), with a client certificate or a
bearer token and the cluster's CA, as files or inline ``-data``.

The service account token is projected and rotated by the kubelet (about hourly), so it is never
read once and kept: ``TokenSource`` reads the file again when its modification time changes
(checked at most every ``TOKEN_CHECK_S``) and whenever the API server answers 401.

Everything here reads files and so blocks: the client calls it off the event loop
(``asyncio.to_thread``).
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_CHECK_S = 10.0


class KubeConfigError(ValueError):
    """The API server's location or credentials cannot be found or read."""


class TokenSource:
    """A bearer token read from a file and read again when the file changes (a projected
    service account token is rotated in place). Thread-safe; blocking (call off the loop)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._token = ""
        self._mtime: float | None = None
        self._checked = float("-inf")

    def token(self, *, force: bool = False) -> str:
        with self._lock:
            now = time.monotonic()
            if not force and self._token and now - self._checked < TOKEN_CHECK_S:
                return self._token
            self._checked = now
            try:
                mtime = self.path.stat().st_mtime
                if force or mtime != self._mtime or not self._token:
                    self._token = self.path.read_text().strip()
                    self._mtime = mtime
            except OSError as exc:
                if not self._token:
                    raise KubeConfigError(f"cannot read the token file {self.path}: {exc}") from None
            return self._token


@dataclass
class KubeConfig:
    """The API server and credentials. ``token`` is a fixed bearer token; ``token_file`` one read
    (and re-read) from a file; with neither, a client certificate (``client_cert``/``client_key``,
    PEM file paths) authenticates, or nothing does (anonymous)."""

    server: str
    ca_file: str = ""
    ca_data: bytes = b""
    insecure_skip_verify: bool = False
    client_cert: str = ""
    client_key: str = ""
    token: str = ""
    token_file: str = ""
    namespace: str = ""  # the context's (kubeconfig) or the pod's (in-cluster) namespace, if known
    _token_source: TokenSource | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.server.startswith(("https://", "http://")):
            raise KubeConfigError(f"API server must be an http(s) URL, got {self.server!r}")
        self.server = self.server.rstrip("/")
        if bool(self.client_cert) != bool(self.client_key):
            raise KubeConfigError("a client certificate needs its key (and the key its certificate)")
        if self.token_file:
            self._token_source = TokenSource(self.token_file)

    # ------------------------------------------------------------------ sources

    @classmethod
    def in_cluster(cls, env: Mapping[str, str] | None = None,
                   account_dir: Path = SERVICE_ACCOUNT_DIR) -> "KubeConfig":
        """The pod's own service account (what client-go's InClusterConfig reads)."""
        env = os.environ if env is None else env
        host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise KubeConfigError("not in a Kubernetes pod: KUBERNETES_SERVICE_HOST/PORT are not set (give a "
                                  "kubeconfig instead)")
        if not (account_dir / "token").is_file():
            raise KubeConfigError(f"no service account token at {account_dir / 'token'} (automountServiceAccountToken "
                                  f"off?)")
        namespace_file = account_dir / "namespace"
        namespace = namespace_file.read_text().strip() if namespace_file.is_file() else ""
        host = f"[{host}]" if ":" in host else host  # an IPv6 service address
        return cls(f"https://{host}:{port}", ca_file=str(account_dir / "ca.crt"), token_file=str(account_dir / "token"),
                   namespace=namespace)

    @classmethod
    def from_kubeconfig(cls, path: str | os.PathLike, context: str | None = None) -> "KubeConfig":
        """The cluster and user of ``context`` (default: the current context) of a kubeconfig
        file. Relative file paths in it are relative to the file, as kubectl reads them."""
        path = Path(path)
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise KubeConfigError(f"cannot read kubeconfig {path}: {exc}") from None
        name = context or doc.get("current-context") or ""
        ctx = _named(doc, "contexts", name, "context", path) if name else None
        if ctx is None:
            raise KubeConfigError(f"kubeconfig {path} has no current-context (name one)")
        cluster = _named(doc, "clusters", ctx.get("cluster", ""), "cluster", path)
        user = _named(doc, "users", ctx.get("user", ""), "user", path) if ctx.get("user") else {}
        base = path.parent

        def file(value: str) -> str:
            return str((base / value).resolve()) if value else ""

        cert, key = file(user.get("client-certificate", "")), file(user.get("client-key", ""))
        if user.get("client-certificate-data") or user.get("client-key-data"):
            cert, key = _materialise_key_pair(user.get("client-certificate-data", ""), user.get("client-key-data", ""))
        if user.get("exec") or user.get("auth-provider"):
            raise KubeConfigError(f"kubeconfig {path}: user {ctx.get('user')!r} authenticates by exec/auth-provider, "
                                  f"which this client does not run (use a token or a client certificate)")
        return cls(cluster.get("server", ""), ca_file=file(cluster.get("certificate-authority", "")),
                   ca_data=_b64(cluster.get("certificate-authority-data", "")),
                   insecure_skip_verify=bool(cluster.get("insecure-skip-tls-verify", False)), client_cert=cert,
                   client_key=key, token=user.get("token", ""), token_file=file(user.get("tokenFile", "")),
                   namespace=ctx.get("namespace", ""))

    @classmethod
    def load(cls, kubeconfig: str | None = None, env: Mapping[str, str] | None = None) -> "KubeConfig":
        """``kubeconfig`` if given, else $KUBECONFIG (its first file), else the in-cluster
        service account."""
        env = os.environ if env is None else env
        path = kubeconfig or (env.get("KUBECONFIG", "").split(os.pathsep)[0])
        return cls.from_kubeconfig(path) if path else cls.in_cluster(env)

    # ------------------------------------------------------------------ use

    def bearer_token(self, *, force_reread: bool = False) -> str:
        """The token to send now ("" for none). Blocking when it comes from a file."""
        if self._token_source is not None:
            return self._token_source.token(force=force_reread)
        return self.token

    def ssl_context(self) -> ssl.SSLContext | None:
        """TLS settings for an https server (None for http). Blocking (reads files)."""
        if not self.server.startswith("https://"):
            return None
        if self.insecure_skip_verify:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ctx = ssl.create_default_context(cafile=self.ca_file or None,
                                             cadata=self.ca_data.decode() if self.ca_data else None)
        if self.client_cert:
            ctx.load_cert_chain(self.client_cert, self.client_key)
        return ctx


def _named(doc: dict, section: str, name: str, key: str, path: Path) -> dict:
    for entry in doc.get(section) or []:
        if entry.get("name") == name:
            return entry.get(key) or {}
    raise KubeConfigError(f"kubeconfig {path} has no {key} named {name!r}")


def _b64(value: str) -> bytes:
    return base64.b64decode(value) if value else b""


def _materialise_key_pair(cert_data: str, key_data: str) -> tuple[str, str]:
    """ssl loads a certificate chain only from files: inline kubeconfig data goes to a private
    temporary directory (mode 0700, files 0600) that lives as long as the process."""
    if not cert_data or not key_data:
        raise KubeConfigError("client-certificate-data needs client-key-data (and the other way round)")
    directory = Path(tempfile.mkdtemp(prefix="ferrymq-kube-"))
    paths = []
    for name, data in (("client.crt", cert_data), ("client.key", key_data)):
        target = directory / name
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(_b64(data))
        paths.append(str(target))
    return paths[0], paths[1]
