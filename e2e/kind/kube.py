"""kubectl and in-cluster client helpers for the kind scenarios (e2e/kind/test_kind_e2e.py).

Everything here goes through the cluster's own API server (kubectl on the loopback address kind
published) or runs inside the cluster: clients are pods of FerryMQ's broker image, so the load of
the scenarios only ever targets the cluster's own addresses.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import uuid

from testkit.wait import poll_until

API = "ferrymq.io/v1alpha1"
TAG = os.environ.get("FERRYMQ_IMAGE_TAG", "e2e")
BROKER_IMAGE = f"ferrymq/broker:{TAG}"
SPARK_IMAGE = f"ferrymq/spark:{TAG}"


class KubectlError(RuntimeError):
    pass


def kubectl(*args: str, input: str | None = None, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    p = subprocess.run(["kubectl", *args], input=input, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise KubectlError(f"kubectl {' '.join(args)}: {p.stderr.strip() or p.stdout.strip()}")
    return p


def get(kind: str, name: str | None, ns: str | None) -> dict | None:
    args = ["get", kind, *([name] if name else []), "-o", "json"]
    args += ["-n", ns] if ns else []
    p = kubectl(*args, check=False)
    return json.loads(p.stdout) if p.returncode == 0 else None


def items(kind: str, ns: str, selector: str | None = None) -> list[dict]:
    args = ["get", kind, "-n", ns, "-o", "json", *(["-l", selector] if selector else [])]
    return json.loads(kubectl(*args).stdout)["items"]


def apply(ns: str, *objs: dict) -> None:
    kubectl("apply", "-n", ns, "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def condition(obj: dict | None, type_: str) -> dict:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions", []) if c["type"] == type_), {})


def wait_status(kind: str, name: str, ns: str, pred, what: str, timeout: float = 300) -> dict:
    def check():
        obj = get(kind, name, ns)
        return obj if obj and pred(obj) else None
    return poll_until(f"{kind}/{name} {what}", check, timeout, interval=2,
                      diagnostics=lambda: json.dumps((get(kind, name, ns) or {}).get("status"), indent=1))


def pause_reconciliation(kind: str, name: str, ns: str, timeout: float = 120) -> None:
    """Annotate ``name`` to pause its reconciliation and wait until the operator reports it paused.
    The operator reconciles one object at a time, so once ReconciliationPaused is True no resync
    that started before the annotation can still write the object's children: scaling a
    StatefulSet by hand right after the annotation raced such a resync (CI of 87863be: it
    scaled the master back to 1 and its pod never went away)."""
    kubectl("annotate", kind, name, "-n", ns, "ferrymq.io/pause-reconciliation=true", "--overwrite")
    wait_status(kind, name, ns, lambda o: condition(o, "ReconciliationPaused").get("status") == "True",
                "reconciliation paused", timeout)


def pod_ready(pod: dict) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


# ----------------------------------------------------------------------------- in-cluster clients

def toolbox(ns: str, name: str = "toolbox") -> str:
    """A long-running pod of the broker image (the ferrymq package and CLI) to run clients from."""
    apply(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "e2e-toolbox"}},
               "spec": {"containers": [{"name": "tools", "image": BROKER_IMAGE, "imagePullPolicy": "Never",
                                        "command": ["sleep", "infinity"]}],
                        "terminationGracePeriodSeconds": 1}})
    poll_until(f"pod {name} ready", lambda: pod_ready(get("pod", name, ns) or {"metadata": {}}), 180)
    return name


def run_python(ns: str, code: str, *args: str, pod: str = "toolbox", container: str | None = None,
               timeout: float = 600) -> list[dict]:
    """Run ``code`` with the pod's Python (FerryMQ's venv; ``container``: of a pod with several);
    return the JSON lines it printed."""
    p = kubectl("exec", "-i", "-n", ns, pod, *(["-c", container] if container else []), "--", "python", "-", *args,
                input=textwrap.dedent(code), check=False, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError(f"in-cluster client failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def run_job(ns: str, name: str, args: list[str], timeout: float = 600, image: str = BROKER_IMAGE,
            env: list[dict] | None = None) -> str:
    """A Job running the ferrymq CLI in the cluster; its logs once it succeeded. ``env``: the
    container's environment entries (e.g. keys from a Secret)."""
    container = {"name": "client", "image": image, "imagePullPolicy": "Never", "args": args, "env": env or []}
    apply(ns, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
               "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}})
    job = wait_status("job", name, ns, lambda j: j.get("status", {}).get("succeeded") or j.get("status", {}).get("failed"),
                      "finished", timeout)
    logs = kubectl("logs", "-n", ns, f"job/{name}", "--tail=-1").stdout
    assert job["status"].get("succeeded") == 1, f"job {name} failed:\n{logs[-3000:]}"
    return logs


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:5]}"
