"""The chart's CRDs as templates (crds.install): `helm upgrade` upgrades their schemas, `helm
uninstall` keeps them and every resource, crds.install=false renders none, and a release of the
old chart (CRDs from its crds/, owned by no release) is adopted as docs/operations.md says.

Every release here owns CRDs of its own: a copy of the chart whose CRDs are moved to an API group
named after the test's namespace, since the session's release (conftest.helm_release) owns
ferrymq.io's and one release owns a CRD.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.k8s.controlplane import REPO
from testkit.wait import poll_until

CHART = REPO / "charts" / "ferrymq-operator"
KINDS = ("brokers", "consumergroups", "topics", "users")
# The chart's operator, as light as it gets: one replica, no RBAC (its pod is a kwok one anyway).
LIGHT = ["--set", "replicas=1,leaderElection.enabled=false,rbac.create=false,serviceAccount.create=false"]


def run_helm(control_plane, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(control_plane.bin / "helm"), f"--kubeconfig={control_plane.kubeconfig}", *args],
                          capture_output=True, text=True, timeout=300)


def chart_copy(dst: Path, group: str, layout: str = "templates", extra_topic_field: str | None = None) -> Path:
    """The chart copied to ``dst``, its CRDs in API group ``group``. ``layout="crds/"``: the
    old chart, CRDs in crds/ (installed once by Helm, owned by no release). ``extra_topic_field``:
    the Topic's spec gains that integer field (a newer chart's schema)."""
    shutil.copytree(CHART, dst)
    for path in sorted((dst / "files" / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        crd["metadata"]["name"] = f"{crd['spec']['names']['plural']}.{group}"
        crd["spec"]["group"] = group
        if extra_topic_field and crd["spec"]["names"]["kind"] == "Topic":
            spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            spec["properties"][extra_topic_field] = {"type": "integer", "minimum": 1}
        path.write_text(yaml.safe_dump(crd, sort_keys=False))
    if layout == "crds/":
        (dst / "files" / "crds").rename(dst / "crds")
        (dst / "templates" / "crds.yaml").unlink()
    return dst


@pytest.fixture
def group(control_plane, namespace):
    """An API group of this test's own; its CRDs (and so their resources) deleted at the end."""
    name = f"{namespace}.test.ferrymq.io"
    yield name
    control_plane.kubectl("delete", "crd", *(f"{k}.{name}" for k in KINDS), "--ignore-not-found", "--wait=false",
                          check=False)


def established(control_plane, group: str) -> None:
    # (not `kubectl wait`: a CRD just created has no status.conditions yet, which it fails on)
    def all_established() -> bool:
        crds = [control_plane.get("crd", f"{kind}.{group}") for kind in KINDS]
        return all(crd and any(c["type"] == "Established" and c["status"] == "True"
                               for c in (crd.get("status") or {}).get("conditions") or []) for crd in crds)
    poll_until(f"the CRDs of {group} Established", all_established, 60)


def topic(group: str, name: str, **spec) -> dict:
    return {"apiVersion": f"{group}/v1alpha1", "kind": "Topic", "metadata": {"name": name},
            "spec": {"brokerRef": {"name": "demo"}, **spec}}


def apply_topic(control_plane, namespace: str, obj: dict, *flags: str) -> subprocess.CompletedProcess:
    return control_plane.kubectl("apply", "-n", namespace, *flags, "-f", "-", input=yaml.safe_dump(obj), check=False)


def test_rendered_crds_are_the_repositorys_kept_on_uninstall_and_off_with_crds_install_false(control_plane):
    p = run_helm(control_plane, "template", "r", str(CHART))
    assert p.returncode == 0, p.stderr
    rendered = {d["metadata"]["name"]: d for d in yaml.safe_load_all(p.stdout)
                if d and d["kind"] == "CustomResourceDefinition"}
    repo = {c["metadata"]["name"]: c for c in (yaml.safe_load(f.read_text()) for f in sorted((REPO / "crds").glob("*.yaml")))}
    assert sorted(rendered) == sorted(repo) == [f"{k}.ferrymq.io" for k in KINDS]
    for name, crd in rendered.items():
        crd = copy.deepcopy(crd)
        assert crd["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}, name
        assert crd == repo[name], f"{name}: rendered differently from crds/"

    off = run_helm(control_plane, "template", "r", str(CHART), "--set", "crds.install=false")
    assert off.returncode == 0, off.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(off.stdout) if d]
    assert "CustomResourceDefinition" not in kinds and "Deployment" in kinds
    p = run_helm(control_plane, "lint", "--strict", str(CHART), "--set", "crds.install=false")
    assert p.returncode == 0, p.stdout + p.stderr

    # values.schema.json: crds.install a boolean, nothing else under crds
    for bad, needle in (("crds.install=maybe", "crds"), ("crds.keep=false", "keep")):
        p = run_helm(control_plane, "template", "r", str(CHART), "--set", bad)
        assert p.returncode != 0 and needle in p.stderr, (bad, p.stderr)


def test_helm_upgrade_applies_a_new_crd_field_and_resources_keep_its_value(control_plane, namespace, group, tmp_path):
    old = chart_copy(tmp_path / "v1", group)
    new = chart_copy(tmp_path / "v2", group, extra_topic_field="retentionHours")
    control_plane.helm("install", "crdup", str(old), "-n", namespace, *LIGHT)
    established(control_plane, group)
    crd = control_plane.get("crd", f"topics.{group}")
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == "crdup"

    # What the issue is about: under the old schema the API server refuses the new field
    # (kubectl's strict field validation) or, asked to ignore unknown fields as many clients do,
    # silently prunes it.
    refused = apply_topic(control_plane, namespace, topic(group, "before", retentionHours=72))
    assert refused.returncode != 0 and "unknown field" in refused.stderr and "retentionHours" in refused.stderr, refused.stderr
    assert apply_topic(control_plane, namespace, topic(group, "before", retentionHours=72), "--validate=false").returncode == 0
    assert "retentionHours" not in control_plane.get("topics." + group, "before", namespace)["spec"]

    control_plane.helm("upgrade", "crdup", str(new), "-n", namespace, *LIGHT)
    spec = control_plane.get("crd", f"topics.{group}")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["retentionHours"] == {"type": "integer", "minimum": 1}
    # the upgrade's schema is the one the API server validates and prunes by (it may take a moment
    # to reach the handlers): the field is kept, from a new resource and from an updated old one
    def kept(name: str, hours: int) -> bool:
        if apply_topic(control_plane, namespace, topic(group, name, retentionHours=hours)).returncode != 0:
            return False
        return control_plane.get("topics." + group, name, namespace)["spec"].get("retentionHours") == hours
    poll_until("a new Topic keeps retentionHours", lambda: kept("after", 48), 30)
    poll_until("the old Topic, updated, keeps retentionHours", lambda: kept("before", 72), 30)
    bad = apply_topic(control_plane, namespace, topic(group, "bad", retentionHours=0))
    assert bad.returncode != 0 and "retentionHours" in bad.stderr, bad.stderr
    # and a later upgrade with the same chart changes nothing of it
    control_plane.helm("upgrade", "crdup", str(new), "-n", namespace, *LIGHT)
    assert control_plane.get("topics." + group, "after", namespace)["spec"]["retentionHours"] == 48
    control_plane.helm("uninstall", "crdup", "-n", namespace)


def test_helm_uninstall_keeps_the_crds_and_every_resource_and_a_reinstall_adopts_them(
        control_plane, namespace, group, tmp_path):
    chart = chart_copy(tmp_path / "chart", group)
    control_plane.helm("install", "crdkeep", str(chart), "-n", namespace, *LIGHT)
    established(control_plane, group)
    control_plane.apply(topic(group, "orders", readQueueNums=4, writeQueueNums=4), namespace)
    p = control_plane.helm("uninstall", "crdkeep", "-n", namespace, "--wait")
    assert "kept due to the resource policy" in p.stdout + p.stderr
    assert control_plane.get("deployment", "crdkeep-ferrymq-operator", namespace) is None
    for kind in KINDS:
        assert control_plane.get("crd", f"{kind}.{group}") is not None, f"{kind}.{group} deleted by helm uninstall"
    kept = control_plane.get("topics." + group, "orders", namespace)
    assert kept is not None and kept["spec"]["readQueueNums"] == 4
    # installed again (same release): the kept CRDs still carry its ownership, Helm takes them back
    control_plane.helm("install", "crdkeep", str(chart), "-n", namespace, *LIGHT)
    assert control_plane.get("topics." + group, "orders", namespace)["spec"]["readQueueNums"] == 4
    control_plane.helm("uninstall", "crdkeep", "-n", namespace)


@pytest.mark.parametrize("adopt", ["kubectl", "--take-ownership"])
def test_a_release_of_the_old_chart_upgrades_once_its_crds_are_adopted(control_plane, namespace, group, tmp_path, adopt):
    """The old chart created the CRDs from crds/: no Helm ownership, so `helm upgrade` to this
    chart refuses them until they are adopted, as docs/operations.md says (either way)."""
    old = chart_copy(tmp_path / "old", group, layout="crds/")
    new = chart_copy(tmp_path / "new", group, extra_topic_field="retentionHours")
    control_plane.helm("install", "crdold", str(old), "-n", namespace, *LIGHT)
    established(control_plane, group)
    assert "meta.helm.sh/release-name" not in (control_plane.get("crd", f"topics.{group}")["metadata"].get("annotations") or {})
    control_plane.apply(topic(group, "orders", readQueueNums=2), namespace)

    refused = run_helm(control_plane, "upgrade", "crdold", str(new), "-n", namespace, *LIGHT)
    assert refused.returncode != 0 and "invalid ownership metadata" in refused.stderr, refused.stderr
    crds = [f"{k}.{group}" for k in KINDS]
    if adopt == "kubectl":
        # docs/operations.md, "Upgrading from a chart with crds/"
        control_plane.kubectl("label", "crd", *crds, "app.kubernetes.io/managed-by=Helm")
        control_plane.kubectl("annotate", "crd", *crds, "meta.helm.sh/release-name=crdold",
                              f"meta.helm.sh/release-namespace={namespace}")
        control_plane.helm("upgrade", "crdold", str(new), "-n", namespace, *LIGHT)
    else:
        control_plane.helm("upgrade", "crdold", str(new), "-n", namespace, "--take-ownership", *LIGHT)
    for name in crds:
        meta = control_plane.get("crd", name)["metadata"]
        assert meta["annotations"]["helm.sh/resource-policy"] == "keep", name
        assert meta["annotations"]["meta.helm.sh/release-name"] == "crdold", name
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm", name
    def kept() -> bool:
        if apply_topic(control_plane, namespace, topic(group, "orders", readQueueNums=2, retentionHours=24)).returncode:
            return False
        return control_plane.get("topics." + group, "orders", namespace)["spec"].get("retentionHours") == 24
    poll_until("the Topic keeps the new chart's retentionHours", kept, 30)
    control_plane.helm("uninstall", "crdold", "-n", namespace)
    assert control_plane.get("crd", f"topics.{group}") is not None
