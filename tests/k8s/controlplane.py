"""A real, local Kubernetes control plane for tests: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok, on free 127.0.0.1 ports.

Binaries come from e2e/controlplane/build.sh (built from the Go module proxy, cached outside
the clone). Certificates are generated here; the admin user is in system:masters. Pods are
"run" by kwok on fake nodes (they become Running/Ready, nothing executes), and a small
provisioner thread gives each PVC of the test StorageClass a hostPath PV so StatefulSets
with volumeClaimTemplates schedule as they would on a real cluster.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import ssl
import subprocess
import threading
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from testkit.ports import free_port

from testkit.wait import poll_until

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "e2e" / "controlplane" / "build.sh"
STORAGE_CLASS = "ferrymq-test"
PROVISIONER = "ferrymq.io/test-hostpath"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok", "helm")
# A fake pod owned by a Job completes with exit code 0 (kwok's "fast" pod-complete stage);
# one carrying this label fails with exit code 1 instead (FAIL_STAGE: weight 1 beats the
# weight-0 upstream stages whenever both match), so a test can run a failing Job.
FAIL_LABEL = "ferrymq.io/test-pod-fails"
FAIL_STAGE = f"""\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: ferrymq-test-pod-fails
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.labels["{FAIL_LABEL}"]'
      operator: 'In'
      values: ['true']
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
  weight: 1
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - image: {{{{ .image | Quote }}}}
        name: {{{{ .name | Quote }}}}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 1
            finishedAt: {{{{ $now | Quote }}}}
            reason: Error
            startedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
      phase: Failed
"""


def versions() -> dict[str, str]:
    out = {}
    for line in (REPO / "e2e" / "controlplane" / "versions.env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def bin_dir() -> Path:
    root = Path(os.environ.get("FERRYMQ_K8S_CACHE", Path.home() / ".cache" / "ferrymq-k8s"))
    return root / f"k8s-{versions()['K8S_VERSION']}" / "bin"


def missing_binaries() -> list[str]:
    missing = [b for b in BINARIES if not os.access(bin_dir() / b, os.X_OK)]
    if not (bin_dir().parent / "kwok-stages.yaml").is_file():
        missing.append("kwok-stages.yaml")
    return missing


# ---------------------------------------------------------------------------- certificates

def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def _cert(subject: x509.Name, key, issuer_cert, issuer_key, *, ca: bool, sans=(), client: bool = False):
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(subject)
         .issuer_name(issuer_cert.subject if issuer_cert else subject)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=7))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                                          encipher_only=False, decipher_only=False), critical=True)
    else:
        usage = [x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH] if client else [x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]
        b = b.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return b.sign(issuer_key or key, hashes.SHA256())


@dataclass
class Certs:
    dir: Path

    def generate(self) -> "Certs":
        import ipaddress
        self.dir.mkdir(parents=True, exist_ok=True)
        ca_key = _key()
        ca = _cert(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ferrymq-test-ca")]), ca_key, None, None, ca=True)
        srv_key = _key()
        srv = _cert(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]), srv_key, ca, ca_key, ca=False,
                    sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                          x509.DNSName("kubernetes.default.svc")])
        admin_key = _key()
        admin = _cert(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "admin"),
                                 x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters")]),
                      admin_key, ca, ca_key, ca=False, client=True)
        sa_key = _key()
        files = {"ca.crt": ca.public_bytes(serialization.Encoding.PEM), "ca.key": _pem_key(ca_key),
                 "server.crt": srv.public_bytes(serialization.Encoding.PEM), "server.key": _pem_key(srv_key),
                 "admin.crt": admin.public_bytes(serialization.Encoding.PEM), "admin.key": _pem_key(admin_key),
                 "sa.key": _pem_key(sa_key),
                 "sa.pub": sa_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                            serialization.PublicFormat.SubjectPublicKeyInfo)}
        for name, data in files.items():
            (self.dir / name).write_bytes(data)
        return self

    def path(self, name: str) -> str:
        return str(self.dir / name)


# ---------------------------------------------------------------------------- processes

@dataclass
class Proc:
    name: str
    cmd: list[str]
    log_path: Path
    proc: subprocess.Popen | None = None

    def start(self, env: dict | None = None) -> "Proc":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env={**os.environ, **(env or {})}, start_new_session=True)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 15) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class ControlPlane:
    work: Path
    bin: Path = field(default_factory=bin_dir)
    procs: list[Proc] = field(default_factory=list)
    api_port: int = 0
    kubeconfig: Path | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _provisioner: threading.Thread | None = None

    # -- start ----------------------------------------------------------------
    def start(self) -> "ControlPlane":
        self.work.mkdir(parents=True, exist_ok=True)
        certs = Certs(self.work / "pki").generate()
        self.certs = certs
        etcd_port, peer_port = free_port(), free_port()
        self.api_port = free_port()
        etcd = Proc("etcd", [str(self.bin / "etcd"), "--name", "test", "--data-dir", str(self.work / "etcd"),
                             "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
                             "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
                             "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                             "--initial-cluster", f"test=http://127.0.0.1:{peer_port}",
                             "--unsafe-no-fsync", "--log-level", "warn"], self.work / "logs" / "etcd.log")
        self._run(etcd)
        poll_until("etcd /health", lambda: b'"health":"true"' in urllib.request.urlopen(
            f"http://127.0.0.1:{etcd_port}/health", timeout=2).read(), 60, diagnostics=etcd.log_tail)
        server = f"https://127.0.0.1:{self.api_port}"
        api = Proc("kube-apiserver", [
            str(self.bin / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.api_port}",
            "--endpoint-reconciler-type=none", f"--tls-cert-file={certs.path('server.crt')}",
            f"--tls-private-key-file={certs.path('server.key')}", f"--client-ca-file={certs.path('ca.crt')}",
            "--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true", "--authorization-mode=Node,RBAC",
            # As on clusters that enforce it (OpenShift): blockOwnerDeletion needs update on the
            # owner's finalizers, so the chart's RBAC is checked for that too.
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
            f"--service-account-issuer={server}", f"--service-account-key-file={certs.path('sa.pub')}",
            f"--service-account-signing-key-file={certs.path('sa.key')}", "--cert-dir", str(self.work / "apiserver-certs"),
            # A front-proxy CA, so the controllers' delegated authn finds a complete config.
            f"--requestheader-client-ca-file={certs.path('ca.crt')}", "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        ], self.work / "logs" / "kube-apiserver.log")
        self._run(api)
        self.kubeconfig = self._write_kubeconfig(server, certs)
        poll_until("kube-apiserver /readyz", lambda: self._readyz(), 180, interval=0.5, diagnostics=api.log_tail)
        kc = str(self.kubeconfig)
        self._run(Proc("kube-controller-manager", [
            str(self.bin / "kube-controller-manager"), f"--kubeconfig={kc}", "--leader-elect=false",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            f"--root-ca-file={certs.path('ca.crt')}", f"--service-account-private-key-file={certs.path('sa.key')}",
            "--use-service-account-credentials=false", "--controllers=*",
        ], self.work / "logs" / "kube-controller-manager.log"))
        self._run(Proc("kube-scheduler", [
            str(self.bin / "kube-scheduler"), f"--kubeconfig={kc}", "--leader-elect=false",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
        ], self.work / "logs" / "kube-scheduler.log"))
        fail_stage = self.work / "kwok-fail-stage.yaml"
        fail_stage.write_text(FAIL_STAGE)
        self._run(Proc("kwok", [
            str(self.bin / "kwok"), f"--kubeconfig={kc}", f"--config={self.bin.parent / 'kwok-stages.yaml'}",
            f"--config={fail_stage}",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake", "--node-lease-duration-seconds=40",
            "--cidr=10.0.1.0/24", "--node-ip=10.0.0.250",
        ], self.work / "logs" / "kwok.log"))
        self._bootstrap()
        return self

    def _run(self, p: Proc) -> None:
        p.start()
        self.procs.append(p)

    def _write_kubeconfig(self, server: str, certs: Certs) -> Path:
        cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "test",
               "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority": certs.path("ca.crt")}}],
               "users": [{"name": "admin", "user": {"client-certificate": certs.path("admin.crt"),
                                                     "client-key": certs.path("admin.key")}}],
               "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}]}
        path = self.work / "kubeconfig"
        path.write_text(json.dumps(cfg))
        return path

    def _ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.certs.path("ca.crt"))
        ctx.load_cert_chain(self.certs.path("admin.crt"), self.certs.path("admin.key"))
        return ctx

    def _readyz(self) -> bool:
        with urllib.request.urlopen(f"https://127.0.0.1:{self.api_port}/readyz", context=self._ssl(), timeout=3) as r:
            return r.status == 200

    def token_kubeconfig(self, token: str, path: Path) -> Path:
        """A kubeconfig that authenticates with a ServiceAccount token (to test the chart's RBAC)."""
        cfg = json.loads(self.kubeconfig.read_text())
        cfg["users"] = [{"name": "admin", "user": {"token": token}}]
        path.write_text(json.dumps(cfg))
        return path

    # -- kubectl ----------------------------------------------------------------
    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        p = subprocess.run([str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args], input=input,
                           capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({p.returncode}):\n{p.stderr}{p.stdout}")
        return p

    def apply(self, obj: dict | list[dict], namespace: str | None = None) -> None:
        objs = obj if isinstance(obj, list) else [obj]
        doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})
        self.kubectl("apply", "-f", "-", *(["-n", namespace] if namespace else []), input=doc)

    def get(self, kind: str, name: str | None = None, namespace: str | None = None) -> dict | None:
        args = ["get", kind] + ([name] if name else []) + (["-n", namespace] if namespace else []) + ["-o", "json"]
        p = self.kubectl(*args, check=False)
        if p.returncode != 0:
            if "NotFound" in p.stderr:
                return None
            raise RuntimeError(p.stderr)
        return json.loads(p.stdout)

    def helm(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        p = subprocess.run([str(self.bin / "helm"), f"--kubeconfig={self.kubeconfig}", *args], capture_output=True,
                           text=True, timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args)} failed ({p.returncode}):\n{p.stderr}{p.stdout}")
        return p

    # -- cluster contents ---------------------------------------------------------
    def _bootstrap(self) -> None:
        # The default ServiceAccount of a namespace is created by KCM; wait for it so pods
        # (ServiceAccount admission) can be created in "default".
        poll_until("default ServiceAccount", lambda: self.get("serviceaccount", "default", "default"), 120,
                   interval=0.5, diagnostics=self.diagnostics)
        nodes = [{"apiVersion": "v1", "kind": "Node",
                  "metadata": {"name": f"kwok-node-{i}", "annotations": {"kwok.x-k8s.io/node": "fake"},
                               "labels": {"kubernetes.io/hostname": f"kwok-node-{i}", "type": "kwok",
                                          "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
                  "spec": {}} for i in range(3)]
        sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
              "metadata": {"name": STORAGE_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
              "provisioner": PROVISIONER, "volumeBindingMode": "Immediate", "reclaimPolicy": "Delete"}
        self.apply(nodes + [sc])
        poll_until("kwok nodes Ready", self._nodes_ready, 120, interval=0.5, diagnostics=self.diagnostics)
        self._provisioner = threading.Thread(target=self._provision_loop, name="test-pv-provisioner", daemon=True)
        self._provisioner.start()

    def _nodes_ready(self) -> bool:
        items = self.get("nodes")["items"]
        return len(items) == 3 and all(any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
                                       for n in items)

    def _provision_loop(self) -> None:
        """Watch PVCs; give each pending claim of the test class a hostPath PV pre-bound to it
        (KCM's PV controller completes the bind). Nothing mounts it: the pods are fake."""
        while not self._stop.is_set():
            try:
                watch = subprocess.Popen([str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}", "get", "pvc", "-A",
                                          "--watch", "--output-watch-events", "-o", "json"],
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                self._watch_proc = watch
                buf = ""
                for line in watch.stdout:
                    if self._stop.is_set():
                        break
                    buf += line
                    try:  # one event per line (compact JSON); keep reading if it was cut
                        event = json.loads(buf)
                    except json.JSONDecodeError:
                        continue
                    buf = ""
                    self._maybe_provision(event.get("object") or {})
                watch.wait()
            except Exception:  # noqa: BLE001 - restart the watch unless we are stopping
                if self._stop.is_set():
                    return

    def _maybe_provision(self, pvc: dict) -> None:
        spec, meta = pvc.get("spec") or {}, pvc.get("metadata") or {}
        if spec.get("storageClassName") != STORAGE_CLASS or spec.get("volumeName") or meta.get("deletionTimestamp"):
            return
        name = f"pv-{meta['namespace']}-{meta['name']}"[:253]
        pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name, "labels": {"ferrymq.io/test": "true"}},
              "spec": {"capacity": {"storage": spec["resources"]["requests"]["storage"]},
                       "accessModes": spec.get("accessModes", ["ReadWriteOnce"]), "storageClassName": STORAGE_CLASS,
                       "persistentVolumeReclaimPolicy": "Delete",
                       "hostPath": {"path": f"/tmp/ferrymq-test-pv/{name}"},
                       "claimRef": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}}}
        self.kubectl("apply", "-f", "-", input=json.dumps(pv), check=False)

    # -- teardown / diagnostics ---------------------------------------------------
    def diagnostics(self) -> str:
        return "\n".join(f"--- {p.name} ({'alive' if p.alive() else f'exited {p.proc.returncode}'}) ---\n{p.log_tail(30)}"
                         for p in self.procs)

    def stop(self) -> None:
        self._stop.set()
        watch = getattr(self, "_watch_proc", None)
        if watch and watch.poll() is None:
            watch.terminate()
        for p in reversed(self.procs):
            p.stop()
        shutil.rmtree(self.work / "etcd", ignore_errors=True)
