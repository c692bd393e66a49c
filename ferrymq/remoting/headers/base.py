"""The shape every typed header shares: a frozen dataclass whose fields say their wire name,
how their Java text is read (str, int, long, bool), their default and whether a request
without them is refused (docs/wire-format.md#typed-headers).

``Header.read(cmd)`` reads all fields at once through ``RemotingCommand.header_values`` (the
compiled codec where it is built) and raises HeaderFieldError for a missing required field or
a malformed number, exactly as the ``get_*`` readers do; ``to_ext_fields()`` is the dict a
request or response carries (None values are left out when it is sent).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, TypeVar

from ferrymq.remoting.command import FIELD_BOOL, FIELD_INT, FIELD_LONG, FIELD_STR, HeaderSpec, RemotingCommand
from ferrymq.remoting.header_fields import to_header_text

__all__ = ["BOOL", "INT", "LONG", "STR", "Header", "header", "wire"]

STR, INT, LONG, BOOL = FIELD_STR, FIELD_INT, FIELD_LONG, FIELD_BOOL
_MISSING = dataclasses.MISSING

H = TypeVar("H", bound="Header")


def wire(name: str, kind: int = STR, default: Any = None, *, required: bool = False,
         topic: bool = False, group: str | None = None) -> Any:
    """A header field: ``name`` on the wire, read as ``kind``; ``default`` when absent (a required
    field has none when building); ``topic``: the field names the request's topic; ``group``
    ("consumer" or "producer"): it names such a group (the ACL validator checks these)."""
    meta = {"wire": name, "kind": kind, "default": default, "required": required, "topic": topic, "group": group}
    if required:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def header(cls: type[H]) -> type[H]:
    """Makes ``cls`` a frozen keyword-only dataclass and compiles its wire spec."""
    cls = dataclasses.dataclass(frozen=True, kw_only=True, slots=True)(cls)
    fields = dataclasses.fields(cls)
    cls.SPEC = tuple((f.metadata["wire"], f.metadata["kind"], f.metadata["default"], f.metadata["required"])
                     for f in fields)
    cls.ATTRS = tuple(f.name for f in fields)
    cls._from_values, cls.to_ext_fields, cls.fields_of, cls.text_of = _compiled_codec(cls.SPEC, cls.ATTRS)
    cls.TOPIC_FIELDS = tuple(f.metadata["wire"] for f in fields if f.metadata["topic"])
    cls.CONSUMER_GROUP_FIELDS = tuple(f.metadata["wire"] for f in fields if f.metadata["group"] == "consumer")
    cls.PRODUCER_GROUP_FIELDS = tuple(f.metadata["wire"] for f in fields if f.metadata["group"] == "producer")
    return cls


_TEXT_OF_KIND = {  # a field's value as Java text, by kind: the common type directly, else to_header_text
    FIELD_STR: "{v} if type({v}) is str else text({v})",
    FIELD_INT: "str({v}) if type({v}) is int else text({v})",
    FIELD_LONG: "str({v}) if type({v}) is int else text({v})",
    FIELD_BOOL: "('true' if {v} else 'false') if type({v}) is bool else text({v})",
}


def _compiled_codec(spec: HeaderSpec, attrs: tuple[str, ...]) -> tuple[Any, Any, Any, Any]:
    """The header's conversions as straight-line code (SEND and PULL answers are on the hot path):
    values in spec order -> header; header -> ext-field dict; keyword values -> ext-field dict
    without building the header (``fields_of``); keyword values -> the dict of Java text an answer
    carries, None left out (``text_of``: ``to_header_map(fields_of(...))`` in one step, for the
    hottest answers)."""
    build = ", ".join(f"{attr}=values[{i}]" for i, attr in enumerate(attrs))
    fields = ", ".join(f"{name!r}: self.{attr}" for (name, *_), attr in zip(spec, attrs))
    params = ", ".join(attr if required else f"{attr}=defaults[{i}]"
                       for i, ((_, _, _, required), attr) in enumerate(zip(spec, attrs)))
    direct = ", ".join(f"{name!r}: {attr}" for (name, *_), attr in zip(spec, attrs))
    texts = "".join(f"    if {attr} is not None:\n        d[{name!r}] = {_TEXT_OF_KIND[kind].format(v=attr)}\n"
                    for (name, kind, _, _), attr in zip(spec, attrs))
    namespace: dict[str, Any] = {"defaults": tuple(default for _, _, default, _ in spec), "text": to_header_text}
    exec(f"def from_values(cls, values):\n    return cls({build})\n"  # noqa: S102 - our own field names
         f"def to_ext_fields(self):\n    return {{{fields}}}\n"
         f"def fields_of(*, {params}):\n    return {{{direct}}}\n"
         f"def text_of(*, {params}):\n    d = {{}}\n{texts}    return d\n", namespace)
    return (classmethod(namespace["from_values"]), namespace["to_ext_fields"], staticmethod(namespace["fields_of"]),
            staticmethod(namespace["text_of"]))


class Header:
    """Base of every typed header (decorate subclasses with :func:`header`)."""

    __slots__ = ()
    SPEC: ClassVar[HeaderSpec] = ()
    ATTRS: ClassVar[tuple[str, ...]] = ()
    TOPIC_FIELDS: ClassVar[tuple[str, ...]] = ()  # wire names holding a topic
    CONSUMER_GROUP_FIELDS: ClassVar[tuple[str, ...]] = ()  # wire names holding a consumer group
    PRODUCER_GROUP_FIELDS: ClassVar[tuple[str, ...]] = ()  # wire names holding a producer group

    @classmethod
    def read(cls: type[H], cmd: RemotingCommand) -> H:
        """The header ``cmd`` carries; HeaderFieldError names a missing or malformed field."""
        return cls._from_values(cmd.header_values(cls.SPEC))

    @classmethod
    def wire_names(cls) -> tuple[str, ...]:
        return tuple(spec[0] for spec in cls.SPEC)

    def to_ext_fields(self) -> dict[str, object]:  # compiled per class by @header
        """The fields as a request's or response's ext fields (None: left out on the wire)."""
        raise NotImplementedError

    @staticmethod
    def fields_of(**values: Any) -> dict[str, object]:  # compiled per class by @header
        """``cls(**values).to_ext_fields()`` without building the header (same keywords, same defaults)."""
        raise NotImplementedError

    @staticmethod
    def text_of(**values: Any) -> dict[str, str]:  # compiled per class by @header
        """``to_header_map(fields_of(**values))`` in one step: the fields as the Java text an answer carries."""
        raise NotImplementedError

    @classmethod
    def _from_values(cls: type[H], values: tuple) -> H:  # compiled per class by @header
        raise NotImplementedError

    def request(self, code: int, body: bytes | None = None, **options: Any) -> RemotingCommand:
        """A request of ``code`` carrying this header (``options``: RemotingCommand.request's)."""
        return RemotingCommand.request(code, self.to_ext_fields(), body, **options)
