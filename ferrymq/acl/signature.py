"""Request signatures as the official 4.x client makes them (AclClientRPCHook).

The signed content is the values of the request's ext fields, sorted by key and joined
without separators (``Signature`` itself left out), as UTF-8, followed by the raw body;
the signature is Base64(HMAC-SHA1(secret key, content)). Verifiers leave out
``_UNIQUE_KEY_QUERY`` as well, since clients up to 4.9.3 add it after signing while later
ones sign it: :func:`signature_matches` accepts either form.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Mapping

from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import ACCESS_KEY, SECURITY_TOKEN, SIGNATURE, UNIQUE_KEY_QUERY

__all__ = ["ACCESS_KEY", "SECURITY_TOKEN", "SIGNATURE", "Credentials", "sign_request", "signature_matches"]


@dataclass(frozen=True)
class Credentials:
    """An account's keys; the secret never appears in reprs or logs."""

    access_key: str
    secret_key: str = field(repr=False)
    security_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("an access key and a secret key are both required")


def _content(ext: Mapping[str, str], body: bytes | None, skip: tuple[str, ...]) -> bytes:
    # Java sorts in a TreeMap (UTF-16 order); Python's code-point order is the same for
    # every key below U+10000, i.e. every key RocketMQ uses.
    text = "".join(ext[key] for key in sorted(ext) if key not in skip)
    return text.encode("utf-8") + (body or b"")


def _sign(content: bytes, secret_key: str) -> str:
    return base64.b64encode(hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()).decode("ascii")


def sign_request(request: RemotingCommand, credentials: Credentials) -> None:
    """Add AccessKey (and SecurityToken) and the Signature over everything else."""
    ext = request.ext_fields
    ext[ACCESS_KEY] = credentials.access_key
    if credentials.security_token:
        ext[SECURITY_TOKEN] = credentials.security_token
    ext.pop(SIGNATURE, None)
    ext[SIGNATURE] = _sign(_content(ext, request.body, (SIGNATURE,)), credentials.secret_key)


def signature_matches(request: RemotingCommand, secret_key: str) -> bool:
    given = request.ext_fields.get(SIGNATURE)
    if not given:
        return False
    ext, body = request.ext_fields, request.body
    given_bytes = given.encode("utf-8", "replace")
    for skip in ((SIGNATURE, UNIQUE_KEY_QUERY), (SIGNATURE,)):
        if hmac.compare_digest(_sign(_content(ext, body, skip), secret_key).encode("ascii"), given_bytes):
            return True
        if UNIQUE_KEY_QUERY not in ext:
            break  # both forms are the same content
    return False
