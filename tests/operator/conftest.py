"""The operator package lives in operator/ferrymq_operator (not installed by pip: the image
copies it); make it importable for these tests. ``fake_kube``: an in-memory API server for
the reconcile steps that read or write objects."""

import sys
from pathlib import Path

import kopf
import pytest

OPERATOR_DIR = Path(__file__).resolve().parents[2] / "operator"
if str(OPERATOR_DIR) not in sys.path:
    sys.path.insert(0, str(OPERATOR_DIR))


class FakeKube:
    """The kube functions the reconciles call, over a dict of stored objects."""

    def __init__(self):
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.deleted: list[tuple[str, str]] = []

    async def get(self, api_version, kind, ns, name):
        return self.objects.get((kind, ns, name))

    async def apply(self, obj):
        m = obj["metadata"]
        self.objects[(obj["kind"], m["namespace"], m["name"])] = obj
        return obj

    create = apply

    async def list_(self, api_version, kind, ns, selector=None):
        return [o for (k, n, _), o in self.objects.items() if k == kind and n == ns and kind != "StatefulSet"]

    async def delete(self, api_version, kind, ns, name, **kw):
        self.deleted.append((kind, name))
        self.objects.pop((kind, ns, name), None)


@pytest.fixture
def fake_kube(monkeypatch):
    from ferrymq_operator import kube
    fake = FakeKube()
    for name in ("get", "apply", "create", "list_", "delete"):
        monkeypatch.setattr(kube, name, getattr(fake, name))
    monkeypatch.setattr(kopf, "event", lambda *a, **kw: None)
    return fake


@pytest.fixture
def spec_error():
    """The message of the ``error`` a typed model's ``from_resource(obj)`` raises."""
    def check(model, error, obj) -> str:
        with pytest.raises(error) as e:
            model.from_resource(obj)
        return str(e.value)
    return check


@pytest.fixture
def reconcile_invalid(monkeypatch):
    """Run ``reconcile`` (of ``module``) on an invalid resource, failing if it looks its Broker up:
    the status it wrote."""
    async def run(module, reconcile, resource) -> dict:
        async def no_broker(*a, **kw):
            raise AssertionError("the Broker was looked up")
        monkeypatch.setattr(module, "broker_named", no_broker)
        monkeypatch.setattr(kopf, "event", lambda body, **kw: None)
        patch = kopf.Patch()
        await reconcile(resource, patch, None)
        return patch["status"]
    return run
