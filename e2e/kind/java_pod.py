"""The official RocketMQ Java clients' programs in a pod: the files they need and their
containers (the kind node faults' workload, e2e/kind/test_kind_chaos.py): the 4.9.7 client
(remoting) and the 5.x client (gRPC).

No registry is reachable and nothing binary is committed: the jars and our compiled programs
(tests/compat/java, tests/compat/java5) come from the compatibility harness
(testkit/java_client.py, testkit/grpc_clients.py: Maven Central into .cache/, javac).
:func:`copy_into` packs them with a ROCKETMQ_HOME (logback files: every 4.9.7 client log to a
file, none on the console) into a tar stream that `kubectl exec ... tar -x` unpacks into the
pod's shared emptyDir, then leaves a mark. Each client's jars and classes have directories of
their own (lib/ and classes/, lib5/ and classes5/): the two clients never share a classpath. The
containers of :func:`container` (FerryMQ's Spark image: a JRE 17) wait for that mark, then
start the JVM.

    pod = {..., "volumes": [VOLUME], "containers": [tools, container("producer", image, main, args),
                                                    container("grpc", image, main5, args5, CLIENT5)]}
    copy_into(ns, "chaos-workload", "tools")   # any container of the pod that has tar
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from testkit.grpc_clients import JVM_OPTS, java5_dirs
from testkit.java_client import client_jvm_args, ensure_compat_classes, ensure_rocketmq_jars, write_rocketmq_home

ROOT = PurePosixPath("/java")  # the emptyDir, mounted here in every container of the pod
READY = ROOT / "ready"  # written once the files are all there
LOGS = PurePosixPath("/tmp/rocketmq-logs")  # the client's own log files, in each container
VOLUME = {"name": "java", "emptyDir": {}}


@dataclass(frozen=True)
class JavaClient:
    """Where one client's jars and our programs for it are in the pod, and its JVM flags."""

    classpath: str
    jvm_args: tuple[str, ...]


CLIENT4 = JavaClient(f"{ROOT}/classes:{ROOT}/lib/*", tuple(client_jvm_args(ROOT / "home", LOGS)))
# The 5.x client logs under ~/logs/rocketmq. Brokers advertise their pod's DNS name, which a
# re-created pod keeps with a new IP: both the JVM's cache (sun.net.inetaddr.ttl) and gRPC's own
# resolver (the networkaddress.cache.ttl system property) keep a name 30 s by default; 5 s here,
# as docs/clients.md advises Java applications of a FerryMQ cluster.
CLIENT5 = JavaClient(f"{ROOT}/classes5:{ROOT}/lib5/*",
                     (*JVM_OPTS, f"-Duser.home={LOGS}", "-Dsun.net.inetaddr.ttl=5", "-Dnetworkaddress.cache.ttl=5"))


def _no_marker(t: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if t.name.endswith(".complete") else t  # testkit.build_cache's own file


def bundle() -> bytes:
    """A tar of lib/ (the 4.9.7 jars), classes/ (our programs for it), lib5/ (the 5.x client
    jar), classes5/ (our programs for it) and home/ (ROCKETMQ_HOME)."""
    classes, lib = ensure_compat_classes(), ensure_rocketmq_jars()
    classes5, lib5 = java5_dirs()
    buf = io.BytesIO()
    with tempfile.TemporaryDirectory(prefix="ferrymq-java-pod-") as tmp:
        home = write_rocketmq_home(Path(tmp) / "home", Path(LOGS), create_log_dir=False)
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(lib, "lib", filter=_no_marker)
            tar.add(classes, "classes", filter=_no_marker)
            tar.add(lib5, "lib5", filter=_no_marker)
            tar.add(classes5, "classes5", filter=_no_marker)
            tar.add(home, "home")
    return buf.getvalue()


def copy_into(ns: str, pod: str, container: str, timeout: float = 300) -> None:
    """Unpack :func:`bundle` into the pod's emptyDir through ``container`` and mark it ready."""
    p = subprocess.run(["kubectl", "exec", "-i", "-n", ns, pod, "-c", container, "--", "sh", "-c",
                        f"tar -xf - -C {ROOT} && touch {READY}"],
                       input=bundle(), capture_output=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"copying the Java client into {ns}/{pod}: {p.stderr.decode(errors='replace')[-2000:]}")


def container(name: str, image: str, main: str, args: list[str], client: JavaClient = CLIENT4) -> dict:
    """A container running ``java main args`` with ``client``'s classpath and flags once the
    files are there (its stdout and stderr: the container's log)."""
    java = ["java", *client.jvm_args, "-cp", client.classpath, main, *args]
    return {"name": name, "image": image, "imagePullPolicy": "Never",
            "command": ["sh", "-c", f'until [ -f {READY} ]; do sleep 1; done; exec "$@"', name, *java],
            "volumeMounts": [{"name": VOLUME["name"], "mountPath": str(ROOT)}]}
