"""Which unserved ingress-nginx annotations restrict who may reach an Ingress (fail closed).

An Ingress asking ingress-nginx for authentication, an allow-list, a WAF or an access rule in a
snippet must not be served open by a controller that does not serve that annotation: its
routes answer 403 instead (``podway.translate.ingress.nginx.annotations.read`` lists such keys
as ``closed``). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from podway.translate.ingress.nginx.basic_auth import served_keys as basic_auth_keys
from podway.translate.ingress.nginx.error_pages import served_keys as error_pages_keys
from podway.translate.ingress.nginx.ext_auth import served_keys as ext_auth_keys
from podway.translate.ingress.nginx.values import PREFIX


def unserved_keys(raw: Mapping[str, str], served: frozenset[str]) -> tuple[str, ...]:
    """The keys (full names) of ``raw`` (keys without PREFIX) Podway does not serve, sorted;
    ``auth-type: basic``, ``auth-url`` and error pages serve their own keys."""
    every = served | basic_auth_keys(raw) | ext_auth_keys(raw) | error_pages_keys(raw)
    return tuple(sorted(PREFIX + k for k in raw if PREFIX + k not in every))


def closed_keys(raw: Mapping[str, str], served: frozenset[str]) -> tuple[str, ...]:
    """The unserved keys that restrict access (``restricts_access``)."""
    return tuple(k for k in unserved_keys(raw, served) if restricts_access(k, raw[
        k.removeprefix(PREFIX)]))

# Unserved keys that restrict access whatever their value (without PREFIX; "-" ends a prefix).
_RESTRICTING = ("auth-", "satisfy")
# Unserved switches that restrict access when true.
_RESTRICTING_FLAGS = ("enable-modsecurity", "enable-owasp-core-rules")
_SNIPPETS = ("configuration-snippet", "server-snippet", "location-snippet", "stream-snippet")
# An nginx directive that decides access, at the start of a statement of a snippet.
_ACCESS_DIRECTIVE = re.compile(
    r"(?:^|[;{}\s])(allow|deny|auth_basic|auth_request|auth_jwt|satisfy|"
    r"ssl_verify_client|access_by_lua\w*)\s")


def restricts_access(key: str, value: str) -> bool:
    """Whether an unserved key (without PREFIX) restricts who may reach the Ingress: serving
    the Ingress without it would serve open what its owner closed."""
    short = key.removeprefix(PREFIX)
    if short in _SNIPPETS:
        return _ACCESS_DIRECTIVE.search(value) is not None
    if short in _RESTRICTING_FLAGS:
        return value.strip().lower() not in ("0", "f", "false")  # ingress-nginx's false
    return any(short == name or (name.endswith("-") and short.startswith(name))
               for name in _RESTRICTING)
