"""Basic authentication and authorization rules of a route, as HAProxy ``http-request`` rules.

* ``BasicAuth``: the IR holds ``{SHA}`` digests (base64 of the password's SHA-1), which a
  HAProxy ``userlist`` cannot check (it takes crypt(3) hashes). So the check is made of sample
  fetches: the client's password (``http_auth_pass``) hashed with ``sha1,base64``, joined to
  its user name (``http_auth_user``), must be one of the route's ``user:digest`` pairs; anyone
  else gets 401 with ``WWW-Authenticate: Basic realm="<realm>"`` (``http-request auth``).
* ``Authorization``: first match decides, as Envoy's: each rule in order sets ``txn.az`` to
  ``allow`` or ``deny`` when it matches and nothing earlier did (client address ``src``, full
  header values ``req.fhdr`` exact, ``method``); then ``deny`` — or nothing set with a default
  of Deny — is 403.

Each line carries the route's condition (``when``), so it applies to that route only.
"""

from __future__ import annotations

from podway.haproxy.names import word
from podway.ir import AccessRule, Authorization, BasicAuth

_SHA = "{SHA}"


def basic_auth(f: BasicAuth, when: str) -> list[str]:
    pairs = " ".join(word(f"{name}:{digest.removeprefix(_SHA)}") for name, digest in f.users
                     if digest.startswith(_SHA))
    realm = word(f.realm or "podway")
    return [f"  http-request set-var(txn.ph) http_auth_pass,sha1,base64 if {when}",
            f"  http-request set-var(txn.cred) http_auth_user,concat(:,txn.ph) if {when}",
            f"  http-request auth realm {realm} if {when} !{{ var(txn.cred) -m str {pairs} }}"]


def authorization(f: Authorization, when: str) -> list[str]:
    out = []
    for rule in f.rules:
        verdict = "allow" if rule.allow else "deny"
        out.append(f"  http-request set-var(txn.az) str({verdict}) if {when} "
                   f"!{{ var(txn.az) -m found }}{_conditions(rule)}")
    out.append(f"  http-request deny deny_status 403 if {when} {{ var(txn.az) -m str deny }}")
    if not f.default_allow:
        out.append(f"  http-request deny deny_status 403 if {when} !{{ var(txn.az) -m found }}")
    return out


def _conditions(rule: AccessRule) -> str:
    parts = []
    if rule.cidrs:
        parts.append(f"{{ src {' '.join(word(c) for c in rule.cidrs)} }}")
    for name, values in rule.headers:
        parts.append(f"{{ req.fhdr({word(name)}) -m str {' '.join(word(v) for v in values)} }}")
    if rule.methods:
        parts.append(f"{{ method {' '.join(word(m) for m in rule.methods)} }}")
    return "".join(f" {p}" for p in parts)
