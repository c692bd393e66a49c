"""The official RocketMQ 4.9.7 Java client's programs in a pod: the files they need and their
containers (the kind node faults' workload, e2e/kind/test_kind_chaos.py).

No registry is reachable and nothing binary is committed: the jars and our compiled programs
(tests/compat/java) come from the compatibility harness (testkit/java_client.py: Maven Central
into .cache/, javac). :func:`copy_into` packs them with a ROCKETMQ_HOME (logback files: every
client log to a file, none on the console) into a tar stream that `kubectl exec ... tar -x`
unpacks into the pod's shared emptyDir, then leaves a mark. The containers of :func:`container`
(FerryMQ's Spark image: a JRE 17) wait for that mark, then start the JVM.

    pod = {..., "volumes": [VOLUME], "containers": [tools, container("producer", image, main, args)]}
    copy_into(ns, "chaos-workload", "tools")   # any container of the pod that has tar
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from testkit.java_client import client_jvm_args, ensure_compat_classes, ensure_rocketmq_jars, write_rocketmq_home

ROOT = PurePosixPath("/java")  # the emptyDir, mounted here in every container of the pod
READY = ROOT / "ready"  # written once the files are all there
LOGS = PurePosixPath("/tmp/rocketmq-logs")  # the client's own log files, in each container
VOLUME = {"name": "java", "emptyDir": {}}


def bundle() -> bytes:
    """A tar of lib/ (the 4.9.7 jars), classes/ (our programs) and home/ (ROCKETMQ_HOME)."""
    classes, lib = ensure_compat_classes(), ensure_rocketmq_jars()
    buf = io.BytesIO()
    with tempfile.TemporaryDirectory(prefix="ferrymq-java-pod-") as tmp:
        home = write_rocketmq_home(Path(tmp) / "home", Path(LOGS), create_log_dir=False)
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(lib, "lib", filter=lambda t: None if t.name.endswith(".stamp") else t)
            tar.add(classes, "classes", filter=lambda t: None if t.name.endswith(".stamp") else t)
            tar.add(home, "home")
    return buf.getvalue()


def copy_into(ns: str, pod: str, container: str, timeout: float = 300) -> None:
    """Unpack :func:`bundle` into the pod's emptyDir through ``container`` and mark it ready."""
    p = subprocess.run(["kubectl", "exec", "-i", "-n", ns, pod, "-c", container, "--", "sh", "-c",
                        f"tar -xf - -C {ROOT} && touch {READY}"],
                       input=bundle(), capture_output=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"copying the Java client into {ns}/{pod}: {p.stderr.decode(errors='replace')[-2000:]}")


def container(name: str, image: str, main: str, args: list[str]) -> dict:
    """A container running ``java main args`` once the files are there (its stdout and stderr:
    the container's log)."""
    java = ["java", *client_jvm_args(ROOT / "home", LOGS), "-cp", f"{ROOT}/classes:{ROOT}/lib/*", main, *args]
    return {"name": name, "image": image, "imagePullPolicy": "Never",
            "command": ["sh", "-c", f'until [ -f {READY} ]; do sleep 1; done; exec "$@"', name, *java],
            "volumeMounts": [{"name": VOLUME["name"], "mountPath": str(ROOT)}]}
