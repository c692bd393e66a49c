"""The ``oidc:`` section of the console's accounts file: single sign-on through an OpenID
Connect provider (Keycloak, Dex, Okta, Entra ID, ...), and how its users get a role.

    oidc:
      issuer: https://sso.example.com/realms/ops
      clientId: ferrymq-console
      clientSecret: "..."                # none: a public client (PKCE alone)
      scopes: [openid, profile, groups]   # default openid profile email
      usernameClaim: preferred_username  # default; falls back to sub
      groupsClaim: groups                # a list of names (or one name)
      roles:                             # group -> role; the highest a user's groups give applies
        mq-admins: admin
        mq-operators: operator
        everyone: viewer
      bodyGroups: [mq-admins]            # members may read message bodies
      defaultRole: none                  # a user in none of these groups: refused (or a role)
      redirectUrl: https://mq.example.com/auth/oidc/callback   # default: from the request
      label: Sign in with Keycloak
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["OidcError", "OidcSettings", "parse_oidc"]

_ROLES = ("viewer", "operator", "admin")  # as ferrymq.console.accounts.ROLES
_KEYS = {"issuer", "clientId", "clientSecret", "scopes", "usernameClaim", "groupsClaim", "roles", "bodyGroups",
         "defaultRole", "redirectUrl", "label", "caFile"}
_CLAIM = re.compile(r"[A-Za-z0-9_.:/-]{1,128}")


class OidcError(ValueError):
    """The oidc section cannot be used, with the reason."""


@dataclass(frozen=True)
class OidcSettings:
    issuer: str
    client_id: str
    client_secret: str | None = None
    scopes: tuple[str, ...] = ("openid", "profile", "email")
    username_claim: str = "preferred_username"
    groups_claim: str = "groups"
    roles: tuple[tuple[str, str], ...] = ()  # (group, role)
    body_groups: frozenset[str] = frozenset()
    default_role: str | None = None
    redirect_url: str | None = None
    label: str = "Sign in with single sign-on"
    ca_file: str | None = None

    def role_of(self, groups: list[str]) -> str | None:
        """The highest role any of ``groups`` maps to, else the default role (None: refused)."""
        mapped = [role for group, role in self.roles if group in groups]
        if not mapped:
            return self.default_role
        return max(mapped, key=_ROLES.index)


def parse_oidc(section, source: str = "accounts") -> OidcSettings:
    where = f"{source}: oidc"
    if not isinstance(section, dict):
        raise OidcError(f"{where}: a mapping with issuer, clientId and roles")
    unknown = sorted(set(section) - _KEYS)
    if unknown:
        raise OidcError(f"{where}: unknown keys {', '.join(map(str, unknown))}")
    issuer = _text(section, "issuer", where)
    parts = urlsplit(issuer)
    if parts.scheme not in ("https", "http") or not parts.netloc or parts.query or parts.fragment:
        raise OidcError(f"{where}: issuer must be an http(s) URL without query or fragment, got {issuer!r}")
    if parts.scheme == "http" and parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise OidcError(f"{where}: issuer must be https (plain http only on a loopback address), got {issuer!r}")
    client_id = _text(section, "clientId", where)
    secret = section.get("clientSecret")
    if secret is not None and (not isinstance(secret, str) or not secret):
        raise OidcError(f"{where}: clientSecret must be text (leave it out for a public client)")
    scopes = section.get("scopes", ["openid", "profile", "email"])
    if not isinstance(scopes, list) or "openid" not in scopes or not all(isinstance(s, str) and s for s in scopes):
        raise OidcError(f"{where}: scopes must be a list of names holding openid, got {scopes!r}")
    claims = {}
    for key, default in (("usernameClaim", "preferred_username"), ("groupsClaim", "groups")):
        value = section.get(key, default)
        if not isinstance(value, str) or not _CLAIM.fullmatch(value):
            raise OidcError(f"{where}: {key} must be a claim name, got {value!r}")
        claims[key] = value
    roles = section.get("roles", {})
    if not isinstance(roles, dict) or not all(isinstance(g, str) and g for g in roles):
        raise OidcError(f"{where}: roles must map group names to roles")
    bad = {g: r for g, r in roles.items() if r not in _ROLES}
    if bad:
        raise OidcError(f"{where}: roles: {', '.join(f'{g}: {r!r}' for g, r in bad.items())}: "
                        f"a role is one of {', '.join(_ROLES)}")
    default_role = section.get("defaultRole", "none")
    if default_role not in (*_ROLES, "none"):
        raise OidcError(f"{where}: defaultRole must be none or one of {', '.join(_ROLES)}, got {default_role!r}")
    if not roles and default_role == "none":
        raise OidcError(f"{where}: no role for anyone: give roles (group -> role) or a defaultRole")
    body_groups = section.get("bodyGroups", [])
    if not isinstance(body_groups, list) or not all(isinstance(g, str) and g for g in body_groups):
        raise OidcError(f"{where}: bodyGroups must be a list of group names")
    redirect = section.get("redirectUrl")
    if redirect is not None and (not isinstance(redirect, str) or urlsplit(redirect).scheme not in ("http", "https")
                                 or not redirect.endswith("/auth/oidc/callback")):
        raise OidcError(f"{where}: redirectUrl must be the console's http(s) URL ending in /auth/oidc/callback")
    label = section.get("label", OidcSettings.label)
    if not isinstance(label, str) or not label.strip() or len(label) > 80:
        raise OidcError(f"{where}: label must be text of at most 80 characters")
    ca_file = section.get("caFile")
    if ca_file is not None and not isinstance(ca_file, str):
        raise OidcError(f"{where}: caFile must be a path")
    return OidcSettings(issuer, client_id, secret, tuple(scopes), claims["usernameClaim"],
                        claims["groupsClaim"], tuple(roles.items()), frozenset(body_groups),
                        None if default_role == "none" else default_role, redirect, label.strip(), ca_file)


def _text(section: dict, key: str, where: str) -> str:
    value = section.get(key)
    if not isinstance(value, str) or not value.strip():
        raise OidcError(f"{where}: {key} is required")
    return value.strip()
