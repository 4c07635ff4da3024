"""htpasswd users as Envoy's basic auth filter checks them: ``{SHA}`` hashes only. Pure.

``{PLAIN}`` passwords are hashed here; any other hash (``$apr1$``, bcrypt, crypt, ``{SSHA}``)
cannot be checked, and its user is returned apart so the caller can name it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

from podway.model import Secret
from podway.translate.core.problems import quote

_SHA = "{SHA}"
_PLAIN = "{PLAIN}"


def lines(text: str) -> list[tuple[str, str]]:
    """(user, hash) of each line of an htpasswd file (comments and blank lines skipped)."""
    out = []
    for line in text.splitlines():
        line = line.strip()  # noqa: PLW2901
        if line and not line.startswith("#"):
            user, _, digest = line.partition(":")
            out.append((user.strip(), digest.split(":")[0].strip()))
    return out


def per_key(secret: Secret) -> list[tuple[str, str]]:
    """(user, hash) of a Secret holding one user per key (ingress-nginx's auth-map)."""
    return [(user, (secret.get(user) or b"").decode("utf-8", "replace").strip())
            for user in sorted({*secret.data, *secret.string_data})]


def users(entries: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[str]]:
    """(user, ``{SHA}`` digest) the engine can check, first entry of a name wins (as nginx
    reads the file); and the names it cannot."""
    found: list[tuple[str, str]] = []
    unusable: list[str] = []
    seen: set[str] = set()
    for user, digest in entries:
        if not user or user in seen or any(c.isspace() or c == ":" for c in user):
            continue
        seen.add(user)
        checked = sha(digest)
        if checked is None:
            unusable.append(quote(user))
        else:
            found.append((user, checked))
    return found, unusable


def sha(digest: str) -> str | None:
    """The ``{SHA}`` form of an htpasswd hash, or None when the engine cannot check it."""
    if digest.startswith(_PLAIN):
        raw = hashlib.sha1(digest[len(_PLAIN):].encode(), usedforsecurity=False).digest()
        return _SHA + base64.b64encode(raw).decode()
    if not digest.startswith(_SHA):
        return None
    try:
        raw = base64.b64decode(digest[len(_SHA):], validate=True)
    except (binascii.Error, ValueError):
        return None
    return _SHA + base64.b64encode(raw).decode() if len(raw) == 20 else None
