"""What a decoded header holds, and how Python values become header field strings.

Java puts every custom header field on the wire as `String.valueOf(field)`, so peers
expect decimal integers and lower-case booleans. Everything that places a value into
extFields goes through `to_header_text` so all paths agree.
"""

from __future__ import annotations

import json
from typing import Mapping

# A decoded header, in RemotingCommand's positional field order so it can be splatted
# straight into the constructor: (code, language, version, opaque, flag, remark, ext).
HeaderFields = tuple[int, int, int, int, int, str | None, dict[str, str]]


def to_header_text(value: object) -> str | None:
    """Java-like toString; None stays None (= field absent)."""
    if value is None:
        return None
    if type(value) is str:  # the common case first: no conversion at all
        return value
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))  # IntEnum and friends travel as plain numbers
    if isinstance(value, (dict, list)):
        # Only reachable from JSON headers written by non-Java peers; fastjson would
        # hand such a value to a String field as its JSON text, so we do the same.
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def to_header_map(values: Mapping[str, object] | None) -> dict[str, str]:
    """A custom-header map with every value as Java text and absent (None) values left out."""
    if not values:
        return {}
    result: dict[str, str] = {}
    for key, value in values.items():
        text = to_header_text(value)
        if text is not None:
            result[key] = text
    return result
