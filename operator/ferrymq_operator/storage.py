"""Raising ``spec.storage.size`` on a running Broker: pure decisions over the brokers' claims.

A StatefulSet's volumeClaimTemplates cannot change, so the operator (reconcile_broker)
expands each existing claim where its StorageClass allows it (``allowVolumeExpansion``),
recreates the StatefulSet around its running pods (deleted with the Orphan policy, created
again) so new pods get claims of the new size, and says in the condition StorageResized
which claims keep their size and why. Nothing here fails a reconcile.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ferrymq_operator.conditions import Condition
from ferrymq_operator.quantity import to_bytes
from ferrymq_operator.views import ClaimView, StorageClassView, size_bytes


@dataclass(frozen=True)
class ExpansionPlan:
    size: str
    expand: list[str] = field(default_factory=list)          # claims to patch to ``size`` now
    not_expandable: dict[str, str] = field(default_factory=dict)  # claim -> why it keeps its size
    resizing: list[str] = field(default_factory=list)        # asked for ``size``, capacity not there yet

    @property
    def done(self) -> bool:
        return not (self.expand or self.not_expandable or self.resizing)


def plan_expansion(claims: list[dict], size: str, classes: dict[str, dict | None]) -> ExpansionPlan:
    """Which of the brokers' ``claims`` to expand to ``size``. ``classes``: StorageClass name ->
    the StorageClass (None: it does not exist) for the classes of claims smaller than ``size``."""
    want = to_bytes(size)
    expand, refused, resizing = [], {}, []
    for pvc in sorted(map(ClaimView, claims), key=lambda c: c.name):
        name = pvc.name
        requested, capacity = size_bytes(pvc.requested), size_bytes(pvc.capacity)
        if requested is not None and requested >= want:
            if capacity is not None and capacity < want:
                resizing.append(name)
            continue
        cls_name = pvc.storage_class
        cls = classes.get(cls_name) if cls_name else None
        if not cls_name:
            refused[name] = "it has no StorageClass"
        elif cls is None:
            refused[name] = f"its StorageClass {cls_name} does not exist"
        elif not StorageClassView(cls).allows_expansion:
            refused[name] = f"its StorageClass {cls_name} does not allow volume expansion"
        elif not pvc.bound:
            refused[name] = "it is not bound yet"
        else:
            expand.append(name)
    return ExpansionPlan(size, expand, refused, resizing)


def classes_to_read(claims: list[dict], size: str) -> set[str]:
    """The StorageClasses plan_expansion needs: those of claims smaller than ``size``."""
    want = to_bytes(size)
    out = set()
    for pvc in map(ClaimView, claims):
        requested = size_bytes(pvc.requested)
        if (requested is None or requested < want) and pvc.storage_class:
            out.add(pvc.storage_class)
    return out


def expansion_patch(size: str) -> dict:
    return {"spec": {"resources": {"requests": {"storage": size}}}}


def storage_condition(plan: ExpansionPlan, expanded_now: list[str] | None = None) -> Condition:
    """StorageResized: True once every claim holds ``spec.storage.size``; False while claims are
    being resized (Resizing), or when some cannot be (ExpansionNotSupported: they keep their
    size, new pods get the new one)."""
    if plan.not_expandable:
        detail = "; ".join(f"{name}: {why}" for name, why in sorted(plan.not_expandable.items()))
        return Condition("StorageResized", False, "ExpansionNotSupported",
                         f"storage.size {plan.size} applies to claims created from now on; these keep their size: "
                         f"{detail}")
    resizing = sorted({*plan.resizing, *plan.expand, *(expanded_now or [])})
    if resizing:
        return Condition("StorageResized", False, "Resizing",
                         f"claims asked to grow to {plan.size}, waiting for the storage to resize: {', '.join(resizing)}")
    return Condition("StorageResized", True, "AtRequestedSize", f"every broker claim holds {plan.size}")
