"""The header table (ferrymq/remoting/headers/, ferrymq/remoting/request_headers.py) is the only
place a request or response field name is spelled (issue 32): reads, ext-field lookups and the
dicts requests and answers are built from name no field by a string literal anywhere else."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ferrymq.remoting import headers
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import (
    FIELDLESS_REQUESTS,
    OTHER_HEADERS,
    REQUEST_HEADERS,
    RESPONSE_HEADERS,
    Header,
)

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("ferrymq", "operator")
TABLE = (ROOT / "ferrymq/remoting/headers", ROOT / "ferrymq/remoting/request_headers.py")
READERS = frozenset({"get_str", "get_int", "get_long", "get_bool"})
SERVERS = ("ferrymq/broker", "ferrymq/namesrv", "ferrymq/controller")
ALL_HEADERS = {*REQUEST_HEADERS.values(), *RESPONSE_HEADERS.values(), *OTHER_HEADERS}


def _field_names() -> frozenset[str]:
    return frozenset(name for cls in ALL_HEADERS for name in cls.wire_names())


def _modules():
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if not any(path == t or t in path.parents for t in TABLE):
                yield path, ast.parse(path.read_text(encoding="utf-8"), str(path))


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_ext_fields(node: ast.AST) -> bool:
    """``node`` is, or is built from, some command's ext_fields (``(cmd.ext_fields or {})`` too)."""
    return any(isinstance(n, ast.Attribute) and n.attr == "ext_fields" for n in ast.walk(node))


def _ext_dict(call: ast.Call) -> ast.Dict | None:
    """The dict literal a RemotingCommand.request(code, {...}) or x.response(..., ext_fields={...}) builds from."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return None
    candidates = [kw.value for kw in call.keywords if kw.arg == "ext_fields"]
    if func.attr == "request" and isinstance(func.value, ast.Name) and func.value.id == "RemotingCommand":
        candidates += call.args[1:2]
    elif func.attr == "response":
        candidates += call.args[2:3]
    return next((c for c in candidates if isinstance(c, ast.Dict)), None)


def spelled_field_names(tree: ast.AST, names: frozenset[str]) -> list[tuple[int, str, str]]:
    """(line, name, how) for every field name spelled in a read, an ext-field lookup or a header dict."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in READERS and node.args and _literal(node.args[0]) in names:
                found.append((node.lineno, _literal(node.args[0]), node.func.attr))
            elif node.func.attr in ("get", "pop") and _is_ext_fields(node.func.value) and node.args \
                    and _literal(node.args[0]) in names:
                found.append((node.lineno, _literal(node.args[0]), "ext_fields." + node.func.attr))
            ext = _ext_dict(node)
            if ext is not None:
                found += [(key.lineno, _literal(key), "header dict") for key in ext.keys if _literal(key) in names]
        elif isinstance(node, ast.Subscript) and _is_ext_fields(node.value) and _literal(node.slice) in names:
            found.append((node.lineno, _literal(node.slice), "ext_fields[...]"))
    return found


def test_the_check_finds_each_kind_of_spelling():
    source = """
req.get_str("consumerGroup", required=True)
answer.get_long("offset", 0)
req.ext_fields["topic"]
req.ext_fields.get("queueId"); (answer.ext_fields or {}).get("leaderAddr")
RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": t, **more})
req.response(ext_fields={"offset": 1})
req.response(0, None, {"msgId": ""})
other.get("topic"); {"topic": 1}; req.get_str(name)
"""
    hits = spelled_field_names(ast.parse(source), _field_names())
    assert [(line, name) for line, name, _ in hits] == [
        (2, "consumerGroup"), (3, "offset"), (4, "topic"), (5, "queueId"), (5, "leaderAddr"), (6, "topic"), (7, "offset"),
        (8, "msgId")]


def test_no_field_name_is_spelled_outside_the_table():
    names = _field_names()
    offences = [f"{path.relative_to(ROOT)}:{line}: {name!r} in {how}"
                for path, tree in _modules() for line, name, how in spelled_field_names(tree, names)]
    assert not offences, "field names belong in ferrymq/remoting/headers:\n" + "\n".join(offences)


def _served_codes() -> dict[int, str]:
    """Request codes the broker, name server and controller serve: keys of their handler tables and
    codes passed to ``register``, named as spelled."""
    spelled: dict[str, str] = {}
    for top in SERVERS:
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                keys = []
                if isinstance(node, ast.Dict):
                    keys = node.keys
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "register":
                    keys = node.args[:1]
                for key in keys:
                    if isinstance(key, ast.Attribute) and isinstance(key.value, ast.Name) and key.value.id == "RequestCode":
                        spelled[key.attr] = f"{path.relative_to(ROOT)}:{key.lineno}"
                    elif isinstance(key, ast.Name) and key.id.startswith("CONTROLLER_"):
                        spelled[key.id] = f"{path.relative_to(ROOT)}:{key.lineno}"
    from ferrymq.common import controller_protocol
    from ferrymq.remoting.codes import RequestCode
    return {int(getattr(RequestCode, n, None) or getattr(controller_protocol, n)): where for n, where in spelled.items()}


def test_every_served_request_code_has_a_header_or_carries_no_fields():
    served = _served_codes()
    assert len(served) > 40
    missing = [f"{where}: code {code}" for code, where in served.items()
               if code not in REQUEST_HEADERS and code not in FIELDLESS_REQUESTS]
    assert not missing, "no header in ferrymq/remoting/headers for:\n" + "\n".join(missing)


@pytest.mark.parametrize("cls", sorted((c for c in ALL_HEADERS if issubclass(c, Header)), key=lambda c: c.__name__))
def test_a_header_reads_back_what_it_writes(cls):
    names = cls.wire_names()
    assert len(set(names)) == len(names), f"{cls.__name__} names a field twice"
    sample = {1: 7, 2: 1 << 40, 3: True, 0: "x"}  # by kind: int, long, bool, str
    written = cls(**{attr: sample[spec[1]] for attr, spec in zip(cls.ATTRS, cls.SPEC)})
    assert cls.read(RemotingCommand.request(1, written.to_ext_fields())) == written


def test_the_acl_fields_come_from_the_table():
    from ferrymq.remoting.codes import RequestCode
    assert headers.topic_field(RequestCode.SEND_MESSAGE) == "topic"
    assert headers.topic_field(RequestCode.SEND_MESSAGE_V2) == headers.topic_field(RequestCode.SEND_BATCH_MESSAGE) == "b"
    assert headers.consumer_group_field(RequestCode.PULL_MESSAGE) == "consumerGroup"
    assert headers.consumer_group_field(RequestCode.CONSUMER_SEND_MSG_BACK) == "group"
    assert headers.topic_field(RequestCode.HEART_BEAT) is None


@pytest.mark.parametrize("cls", sorted((c for c in ALL_HEADERS if issubclass(c, Header)), key=lambda c: c.__name__))
def test_compiled_and_python_readers_agree_on_every_header(cls):
    from ferrymq.remoting.command import header_values, py_header_values
    texts = ("", "7", "-1", "true", "x", "99999999999", "9" * 20)
    for i in range(len(texts) ** 2):
        ext = {name: texts[(i + n * (i // len(texts) + 1)) % len(texts)] for n, name in enumerate(cls.wire_names())}
        ext = {name: text for name, text in ext.items() if text}  # an absent field as well as present ones
        assert header_values(ext, cls.SPEC) == py_header_values(ext, cls.SPEC), ext
