"""Kubernetes quantities ("10Gi", "500M", "1.5Ki") as byte counts, for broker.conf values."""

from __future__ import annotations

import re
from decimal import Decimal

_SUFFIX = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
           "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
# The same pattern the CRDs use, so what the API server accepts this parses.
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
_RE = re.compile(QUANTITY_PATTERN)


def to_bytes(quantity: str | int) -> int:
    if isinstance(quantity, int):
        return quantity
    m = _RE.match(quantity.strip())
    if not m:
        raise ValueError(f"not a quantity: {quantity!r} (expected e.g. 10Gi, 500M, 1024)")
    number = quantity.strip()[: len(quantity.strip()) - len(m.group(2) or "")]
    return int(Decimal(number) * _SUFFIX[m.group(2) or ""])
