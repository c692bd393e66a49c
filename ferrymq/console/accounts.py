"""The console's own accounts: who may sign in, with which role, and whether they may read
message bodies. Kept in one YAML file (in Kubernetes, a Secret mounted as a file), passwords as
scrypt hashes that ``ferrymq console hash-password`` makes:

    users:
      - name: alice
        passwordHash: "scrypt$16384$8$1$<salt>$<hash>"
        role: admin          # viewer | operator | admin
        viewBodies: true     # default false

The file may also (or instead) hold an ``oidc:`` section: single sign-on through an OpenID
Connect provider (:mod:`ferrymq.console.oidc_settings`).

The file is read again when it changes (a Secret updated in place), so a removed account or a
changed role applies to open sessions at their next request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

import yaml

from ferrymq.console.oidc_settings import OidcError, OidcSettings, parse_oidc

log = logging.getLogger(__name__)

__all__ = ["ROLES", "Account", "AccountsError", "AccountsFile", "SignInConfig", "hash_password", "parse_accounts",
           "parse_sign_in", "verify_password"]

# Each role may do what the one before it may, and more (docs/operations.md#sign-in-and-roles).
ROLES = ("viewer", "operator", "admin")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}")
_SCRYPT = re.compile(r"scrypt\$(\d+)\$(\d+)\$(\d+)\$([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+)")
_N, _R, _P = 2 ** 14, 8, 1
_MAX_N = 2 ** 20  # a hash asking for more memory than this is refused, not computed


class AccountsError(ValueError):
    """The accounts file cannot be used, with the reason."""


@dataclass(frozen=True)
class Account:
    name: str
    password_hash: str  # "" for an account from the OIDC provider
    role: str
    view_bodies: bool = False
    source: str = "local"  # or "oidc"

    def may(self, role: str) -> bool:
        """Whether this account holds ``role`` or a higher one."""
        return ROLES.index(self.role) >= ROLES.index(role)


def hash_password(password: str, *, n: int = _N, r: int = _R, p: int = _P) -> str:
    if not password:
        raise AccountsError("an empty password cannot be hashed")
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=_maxmem(n, r))
    return f"scrypt${n}${r}${p}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def verify_password(account: Account, password: str) -> bool:
    """Whether ``password`` is the account's (constant time in the hash compared). Costs tens of
    milliseconds of CPU: call it off the event loop."""
    n, r, p, salt, want = _parse_hash(account.password_hash)
    got = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, dklen=len(want), maxmem=_maxmem(n, r))
    return hmac.compare_digest(got, want)


def _maxmem(n: int, r: int) -> int:
    return 128 * r * n + 2 ** 20


def _parse_hash(text: str) -> tuple[int, int, int, bytes, bytes]:
    m = _SCRYPT.fullmatch(text)
    if not m:
        raise AccountsError("passwordHash must be scrypt$N$r$p$salt$hash (made by `ferrymq console hash-password`)")
    n, r, p = (int(m.group(i)) for i in (1, 2, 3))
    if n < 2 or n & (n - 1) or n > _MAX_N or not 1 <= r <= 32 or not 1 <= p <= 16:
        raise AccountsError(f"passwordHash parameters N={n} r={r} p={p} are out of range "
                            f"(N a power of two up to {_MAX_N}, r 1-32, p 1-16)")
    salt, digest = base64.b64decode(m.group(4)), base64.b64decode(m.group(5))
    if len(digest) < 16:
        raise AccountsError("passwordHash holds a hash shorter than 16 bytes")
    return n, r, p, salt, digest


@dataclass(frozen=True)
class SignInConfig:
    """What the accounts file says: local accounts and, optionally, the OIDC provider."""

    accounts: dict[str, Account]
    oidc: OidcSettings | None = None


def parse_sign_in(text: str, source: str = "accounts") -> SignInConfig:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise AccountsError(f"{source}: not YAML: {e}") from None
    if not isinstance(doc, dict) or not set(doc) & {"users", "oidc"}:
        raise AccountsError(f"{source}: wants a list `users:` of at least one account, an `oidc:` section, or both")
    unknown = sorted(set(doc) - {"users", "oidc"})
    if unknown:
        raise AccountsError(f"{source}: unknown keys {', '.join(map(str, unknown))} (users and oidc are known)")
    try:
        oidc = parse_oidc(doc["oidc"], source) if "oidc" in doc else None
    except OidcError as e:
        raise AccountsError(str(e)) from None
    users = doc.get("users", [])
    if not isinstance(users, list) or (not users and oidc is None):
        raise AccountsError(f"{source}: wants a list `users:` of at least one account")
    return SignInConfig(_parse_users(users, source), oidc)


def parse_accounts(text: str, source: str = "accounts") -> dict[str, Account]:
    return parse_sign_in(text, source).accounts


def _parse_users(users: list, source: str) -> dict[str, Account]:
    accounts: dict[str, Account] = {}
    for i, entry in enumerate(users):
        where = f"{source}: users[{i}]"
        if not isinstance(entry, dict):
            raise AccountsError(f"{where}: an account is a mapping with name, passwordHash and role")
        unknown = sorted(set(entry) - {"name", "passwordHash", "role", "viewBodies"})
        if unknown:
            raise AccountsError(f"{where}: unknown keys {', '.join(map(str, unknown))}")
        name = entry.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise AccountsError(f"{where}: name must be 1-128 letters, digits, '.', '_', '@' or '-', got {name!r}")
        if name in accounts:
            raise AccountsError(f"{where}: {name} is given twice")
        role = entry.get("role")
        if role not in ROLES:
            raise AccountsError(f"{where} ({name}): role must be one of {', '.join(ROLES)}, got {role!r}")
        view_bodies = entry.get("viewBodies", False)
        if not isinstance(view_bodies, bool):
            raise AccountsError(f"{where} ({name}): viewBodies must be true or false, got {view_bodies!r}")
        password_hash = entry.get("passwordHash")
        if not isinstance(password_hash, str):
            raise AccountsError(f"{where} ({name}): passwordHash is required")
        try:
            _parse_hash(password_hash)
        except AccountsError as e:
            raise AccountsError(f"{where} ({name}): {e}") from None
        accounts[name] = Account(name, password_hash, role, view_bodies)
    return accounts


class AccountsFile:
    """The accounts of one file, read again when the file changes. A change that does not
    parse keeps the accounts read before (and says why in :attr:`error`) rather than locking
    everyone out."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.error: str | None = None
        self._stamp: tuple[int, int, int] | None = self._stat()
        self._config = parse_sign_in(self.path.read_text(), str(self.path))

    def get(self, name: str) -> Account | None:
        self._reload_if_changed()
        return self._config.accounts.get(name)

    @property
    def has_local(self) -> bool:
        self._reload_if_changed()
        return bool(self._config.accounts)

    @property
    def oidc(self) -> OidcSettings | None:
        self._reload_if_changed()
        return self._config.oidc

    def _stat(self) -> tuple[int, int, int]:
        st = self.path.stat()  # follows the Secret volume's ..data symlink
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _reload_if_changed(self) -> None:
        try:
            stamp = self._stat()
        except OSError as e:
            self._stamp = None  # read again once it is back
            self._failed(f"{self.path}: {e.strerror}")
            return
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self._config = parse_sign_in(self.path.read_text(), str(self.path))
            self.error = None
        except (OSError, AccountsError) as e:
            self._failed(str(e))

    def _failed(self, why: str) -> None:
        if self.error is None:
            log.warning("console accounts not read again: %s; the accounts read before stay", why)
        self.error = f"{why}; the accounts read before stay"
