"""The CRDs (single source of truth) and the chart's copy of them; structural schemas."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CRDS = sorted((REPO / "crds").glob("*.yaml"))
CHART = REPO / "charts" / "ferrymq-operator"


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def test_chart_carries_identical_crds():
    """The chart renders its CRDs from files/crds/ (templates/crds.yaml, so that `helm upgrade`
    upgrades them): exactly the repository's crds/. It has no crds/ of its own, which Helm would
    install once, without the release's ownership, and never upgrade."""
    chart_crds = sorted((CHART / "files" / "crds").glob("*.yaml"))
    assert CRDS and [p.name for p in chart_crds] == [p.name for p in CRDS]
    for src, copy in zip(CRDS, chart_crds):
        assert copy.read_bytes() == src.read_bytes(), f"{copy} differs from {src}: cp crds/*.yaml {CHART / 'files' / 'crds'}/"
    assert not (CHART / "crds").exists(), "Helm would install charts/ferrymq-operator/crds/ unowned and never upgrade it"
    template = (CHART / "templates" / "crds.yaml").read_text()
    assert '.Files.Glob "files/crds/*.yaml"' in template and '"helm.sh/resource-policy" "keep"' in template


def _walk(schema: dict, path: str):
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("path", CRDS, ids=lambda p: p.name)
def test_crd_is_structural_with_status_printer_columns_and_category(path):
    crd = load(path)
    assert crd["spec"]["group"] == "ferrymq.io"
    assert "ferrymq" in crd["spec"]["names"]["categories"] and crd["spec"]["names"]["shortNames"]
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert "status" in version["subresources"]
    columns = {c["name"] for c in version["additionalPrinterColumns"]}
    assert {"Ready", "Age"} <= columns or {"Status", "Age"} <= columns
    root = version["schema"]["openAPIV3Schema"]
    for where, schema in _walk(root, "$"):
        assert ("type" in schema or schema.get("x-kubernetes-int-or-string")
                or schema.get("x-kubernetes-preserve-unknown-fields")), f"{path.name}: {where} has no type"
    status = root["properties"]["status"]["properties"]
    assert {"conditions", "observedGeneration"} <= set(status)
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]


def test_broker_scale_subresource_and_queue_count_rules():
    broker = load(REPO / "crds" / "ferrymq.io_brokers.yaml")["spec"]["versions"][0]
    assert broker["subresources"]["scale"] == {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                                               "labelSelectorPath": ".status.selector"}
    topic = load(REPO / "crds" / "ferrymq.io_topics.yaml")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = topic["properties"]["spec"]
    assert spec["properties"]["readQueueNums"]["minimum"] == 1 and spec["properties"]["readQueueNums"]["maximum"] == 1024
    assert any("cannot decrease" in r["message"] for r in spec["x-kubernetes-validations"])
    group = load(REPO / "crds" / "ferrymq.io_consumergroups.yaml")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    gspec = group["properties"]["spec"]["properties"]
    assert gspec["protection"]["properties"]["onFallBehind"]["enum"] == ["Disable", "ResetToLatest", "Alert"]
    spark = gspec["sparkJob"]
    assert "x-kubernetes-preserve-unknown-fields" not in spark, "a misspelt sparkJob field is an error, not ignored"
    assert spark["required"] == ["schedule", "topics", "output"]
    assert spark["properties"]["launcher"]["enum"] == ["SparkSubmit", "SparkOperator"]
    status = group["properties"]["status"]["properties"]["sparkJob"]["properties"]
    assert {"cronJob", "lastScheduleTime", "lastSuccessfulTime", "lastRun", "suspended"} <= set(status)
    assert status["lastRun"]["properties"]["result"]["enum"] == ["Running", "Succeeded", "Failed"]


def test_operator_package_does_not_shadow_stdlib_operator():
    assert not (REPO / "operator" / "__init__.py").exists()
    import operator
    assert hasattr(operator, "itemgetter")
