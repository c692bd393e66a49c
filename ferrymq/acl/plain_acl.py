"""RocketMQ's ``plain_acl.yml``: accounts, their permissions and white-listed addresses.

The format and meanings are RocketMQ 4.9's (PlainPermissionManager, Permission,
RemoteAddressStrategyFactory)::

    globalWhiteRemoteAddresses: ["10.10.103.*", "192.168.0.{1,2}"]
    accounts:
      - accessKey: RocketMQ
        secretKey: "12345678"
        whiteRemoteAddress: 192.168.1.1-100    # requests from here skip signature and perms
        admin: false                           # topic/group create, delete, config updates
        defaultTopicPerm: DENY                 # for topics not listed (missing: DENY)
        defaultGroupPerm: SUB
        topicPerms: ["orders=PUB|SUB", "audit=DENY"]
        groupPerms: ["billing=SUB"]

Where RocketMQ silently turns an unknown permission word into DENY, FerryMQ refuses the
file with an error naming the entry: a typo should not lock users out unnoticed.
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferrymq.common.config_loader import ConfigError
from ferrymq.common.protocol import retry_topic

__all__ = ["Account", "AclConfig", "AclConfigError", "AddressPattern", "Perm", "load_acl_file", "parse_acl", "permits"]

MIN_KEY_LENGTH = 7  # RocketMQ: "length should longer than 6"


class AclConfigError(ConfigError):
    """The ACL file cannot be used as it stands; the message names the entry."""


class Perm(enum.IntFlag):
    DENY = 1
    ANY = 2  # needed by requests that may either publish or subscribe
    PUB = 4
    SUB = 8


_PERM_WORDS = {"DENY": Perm.DENY, "PUB": Perm.PUB, "SUB": Perm.SUB, "PUB|SUB": Perm.PUB | Perm.SUB,
               "SUB|PUB": Perm.PUB | Perm.SUB}


def parse_perm(text: Any, where: str) -> Perm:
    word = str(text).strip().upper().replace(" ", "")
    if word not in _PERM_WORDS:
        raise AclConfigError(f"{where}: permission {text!r} is none of DENY, PUB, SUB, PUB|SUB")
    return _PERM_WORDS[word]


def permits(needed: Perm, owned: Perm) -> bool:
    """RocketMQ's Permission.checkPermission: DENY wins; ANY wants PUB or SUB."""
    if owned & Perm.DENY:
        return False
    if needed & Perm.ANY:
        return bool(owned & (Perm.PUB | Perm.SUB))
    return bool(needed & owned)


# ------------------------------------------------------------------ addresses


class AddressPattern:
    """One white-list entry: ``*``, an address, a comma list, ``a.b.c.{1,2}``, or octet
    wildcards and ranges (``192.168.*``, ``192.168.1.1-100``). Blank matches nothing."""

    def __init__(self, text: Any) -> None:
        self.text = "" if text is None else str(text).strip()
        self._any = self.text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*")
        self._exact: set[ipaddress._BaseAddress] = set()
        self._octets: list[tuple[int, int] | frozenset[int]] | None = None
        if self._any or not self.text:
            return
        try:
            self._parse(self.text)
        except ValueError as exc:
            raise AclConfigError(f"remote address pattern {self.text!r}: {exc}") from None

    def _parse(self, text: str) -> None:
        if "," in text and not text.endswith("}"):
            self._exact = {ipaddress.ip_address(part.strip()) for part in text.split(",") if part.strip()}
            return
        if "*" not in text and "-" not in text and "{" not in text:
            self._exact = {ipaddress.ip_address(text)}
            return
        if ":" in text:
            raise ValueError("IPv6 wildcards, ranges and sets are not supported; list the addresses")
        parts = text.split(".")
        if len(parts) > 4:
            raise ValueError("more than four octets")
        octets: list[tuple[int, int] | frozenset[int]] = []
        for i, part in enumerate(parts + ["*"] * (4 - len(parts))):
            part = part.strip()
            if part == "*":
                octets.append((0, 255))
            elif part.startswith("{") and part.endswith("}") and i == len(parts) - 1:
                octets.append(frozenset(_octet(p) for p in part[1:-1].split(",")))
            elif "-" in part:
                low, _, high = part.partition("-")
                lo, hi = _octet(low), _octet(high)
                if lo > hi:
                    raise ValueError(f"range {part} runs backwards")
                octets.append((lo, hi))
            else:
                n = _octet(part)
                octets.append((n, n))
        self._octets = octets

    def matches(self, host: str) -> bool:
        if self._any:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        if self._octets is None:
            return address in self._exact
        if address.version != 4:
            return False
        for value, allowed in zip(address.packed, self._octets):
            if isinstance(allowed, frozenset):
                if value not in allowed:
                    return False
            elif not allowed[0] <= value <= allowed[1]:
                return False
        return True

    def __repr__(self) -> str:
        return f"AddressPattern({self.text!r})"


def _octet(text: str) -> int:
    text = text.strip()
    if not text.isdigit() or int(text) > 255:
        raise ValueError(f"{text!r} is not an octet (0-255)")
    return int(text)


# ------------------------------------------------------------------ accounts


@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)
    remote_address: AddressPattern
    admin: bool
    default_topic_perm: Perm
    default_group_perm: Perm
    # topics by name, groups by their retry topic (%RETRY%group), as RocketMQ keys them
    resource_perms: dict[str, Perm]


@dataclass(frozen=True)
class AclConfig:
    global_white_addresses: tuple[AddressPattern, ...] = ()
    accounts: dict[str, Account] = field(default_factory=dict)


def _resource_perms(entries: Any, *, topics: bool, where: str) -> dict[str, Perm]:
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise AclConfigError(f"{where}: expected a list of 'name=PERM' entries")
    out: dict[str, Perm] = {}
    for entry in entries:
        name, sep, perm = str(entry).partition("=")
        if not sep or not name.strip() or "=" in perm:
            raise AclConfigError(f"{where}: {entry!r} is not 'name=PERM'")
        name = name.strip()
        out[name if topics else retry_topic(name)] = parse_perm(perm, f"{where} {entry!r}")
    return out


def _flag(value: Any, where: str) -> bool:
    if isinstance(value, bool) or value is None:
        return bool(value)
    if str(value).strip().lower() in ("true", "false"):
        return str(value).strip().lower() == "true"
    raise AclConfigError(f"{where}: expected true or false, got {value!r}")


def _account(raw: Any, index: int) -> Account:
    where = f"accounts[{index}]"
    if not isinstance(raw, dict):
        raise AclConfigError(f"{where}: expected a mapping")
    access_key = "" if raw.get("accessKey") is None else str(raw["accessKey"])
    secret_key = "" if raw.get("secretKey") is None else str(raw["secretKey"])
    where = f"account {access_key!r}" if access_key else where
    if len(access_key) < MIN_KEY_LENGTH or len(secret_key) < MIN_KEY_LENGTH:
        raise AclConfigError(f"{where}: accessKey and secretKey must both be at least {MIN_KEY_LENGTH} characters")
    default_topic = raw.get("defaultTopicPerm")
    default_group = raw.get("defaultGroupPerm")
    return Account(
        access_key=access_key, secret_key=secret_key,
        remote_address=AddressPattern(raw.get("whiteRemoteAddress")),
        admin=_flag(raw.get("admin"), f"{where} admin"),
        default_topic_perm=Perm.DENY if default_topic is None else parse_perm(default_topic, f"{where} defaultTopicPerm"),
        default_group_perm=Perm.DENY if default_group is None else parse_perm(default_group, f"{where} defaultGroupPerm"),
        resource_perms={**_resource_perms(raw.get("topicPerms"), topics=True, where=f"{where} topicPerms"),
                        **_resource_perms(raw.get("groupPerms"), topics=False, where=f"{where} groupPerms")},
    )  # fmt: skip


def parse_acl(doc: Any) -> AclConfig:
    """An AclConfig from the YAML document's data (an empty document: no accounts)."""
    if doc is None:
        return AclConfig()
    if not isinstance(doc, dict):
        raise AclConfigError("the ACL file must be a mapping with globalWhiteRemoteAddresses and accounts")
    white = doc.get("globalWhiteRemoteAddresses") or []
    accounts_raw = doc.get("accounts") or []
    if not isinstance(white, list) or not isinstance(accounts_raw, list):
        raise AclConfigError("globalWhiteRemoteAddresses and accounts must be lists")
    accounts: dict[str, Account] = {}
    for i, raw in enumerate(accounts_raw):
        account = _account(raw, i)
        if account.access_key in accounts:
            raise AclConfigError(f"account {account.access_key!r} is defined twice")
        accounts[account.access_key] = account
    return AclConfig(tuple(AddressPattern(w) for w in white), accounts)


def load_acl_file(path: str | Path) -> AclConfig:
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise AclConfigError(f"cannot read ACL file {path}: {exc.strerror or exc}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AclConfigError(f"ACL file {path} is not valid YAML: {exc}") from None
    try:
        return parse_acl(doc)
    except AclConfigError as exc:
        raise AclConfigError(f"ACL file {path}: {exc}") from None
