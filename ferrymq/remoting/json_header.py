"""The JSON header serialization (docs/wire-format.md#json-header).

Encoding mimics fastjson's output for RemotingCommand: keys in alphabetical order, null
`remark`/`extFields` left out, `language` as the enum name. Decoding is as forgiving as
fastjson: language as name or number, extFields values of any JSON type.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ferrymq.common import speedups
from ferrymq.remoting.codes import LanguageCode
from ferrymq.remoting.errors import HeaderDecodeError
from ferrymq.remoting.header_fields import HeaderFields, to_header_map, to_header_text

log = logging.getLogger(__name__)


def _not_serializable(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# json's C encoder, made once: JSONEncoder.encode builds one per call (a few us of a frame's
# encoding). No circular check (headers are flat), compact separators, non-ASCII kept.
if json.encoder.c_make_encoder is not None:
    _iterencode = json.encoder.c_make_encoder(None, _not_serializable, json.encoder.encode_basestring,
                                              None, ":", ",", False, False, True)

    def _dumps(obj: dict[str, Any]) -> str:
        return "".join(_iterencode(obj, 0))
else:  # an interpreter without json's C speedups
    _dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_loads = json.JSONDecoder().decode

_LANGUAGE_NAMES = {member.value: member.name for member in LanguageCode}
_LANGUAGE_VALUES = {member.name: member.value for member in LanguageCode}

# The compiled twin (ferrymq/remoting/_header_codec.c) handles the shapes peers send
# and answers NotImplemented for anything else, which the functions here then take.
_native = speedups.load("ferrymq.remoting._header_codec")


def encode_json_header(fields: HeaderFields) -> bytes:
    code, language, version, opaque, flag, remark, ext_fields = fields
    # Built in alphabetical key order so no sorting is needed per frame.
    header: dict[str, Any] = {"code": code}
    if ext_fields:
        header["extFields"] = ext_fields
    header["flag"] = flag
    # fastjson writes the enum name; a language we have no name for goes out as its
    # ordinal, which fastjson accepts as well.
    header["language"] = _LANGUAGE_NAMES.get(language, language)
    header["opaque"] = opaque
    if remark is not None:
        header["remark"] = remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = version
    return _dumps(header).encode("utf-8")


def encode_json_frame(fields: HeaderFields, body: bytes | None) -> bytes | None:
    """The whole frame (length prefix included) of a JSON header and ``body`` when the
    compiled codec writes it, else None: the caller then encodes it the general way."""
    if _native is None:
        return None
    frame = _native.encode_frame(*fields, body, _LANGUAGE_NAMES)
    return None if frame is NotImplemented else frame


def decode_json_header_bytes(raw: bytes | memoryview) -> HeaderFields:
    """decode_json_header of ``raw`` read as UTF-8, malformed sequences replaced (as Java's
    new String(bytes, UTF_8))."""
    if _native is not None:
        fields = _native.decode(raw, _LANGUAGE_VALUES)
        if fields is not NotImplemented:
            return fields
    return decode_json_header(str(raw, "utf-8", "replace"))


def decode_json_header(text: str) -> HeaderFields:
    try:
        obj = _loads(text)
    except ValueError as exc:
        raise HeaderDecodeError(f"unparsable JSON header: {exc}") from None
    except RecursionError:
        raise HeaderDecodeError("unparsable JSON header: nested too deeply") from None
    if not isinstance(obj, dict):
        raise HeaderDecodeError("JSON header is not an object")
    remark = obj.get("remark")
    return (
        _int_field(obj, "code"),
        _language(obj.get("language")),
        _int_field(obj, "version"),
        _int_field(obj, "opaque"),
        _int_field(obj, "flag"),
        None if remark is None else to_header_text(remark),
        _ext_fields(obj.get("extFields")),
    )


def _int_field(obj: dict[str, Any], key: str) -> int:
    # Java int fields default to 0 when the key is missing.
    value = obj.get(key, 0)
    if type(value) is int:
        return value
    if value is None:
        return 0
    try:
        # fastjson also coerces numeric strings and floats into int fields.
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise HeaderDecodeError(f"JSON header field {key!r} is not a number: {value!r}") from None


def _language(value: object) -> int:
    if value is None:
        return LanguageCode.JAVA  # the Java field's initial value
    if type(value) is int:
        return value
    if isinstance(value, str):
        try:
            return LanguageCode[value].value
        except KeyError:
            # A newer peer's language: remembering it as OTHER beats dropping it.
            log.debug("unknown language %r in JSON header, treated as OTHER", value)
            return LanguageCode.OTHER
    raise HeaderDecodeError(f"JSON header field 'language' is invalid: {value!r}")


def _ext_fields(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise HeaderDecodeError("JSON header field 'extFields' is not an object")
    if all(type(text) is str for text in value.values()):
        return value  # what Java sends (a Map<String, String>): nothing to convert
    return to_header_map(value)
