"""A TrafficPolicy's ``security`` section: who may reach the routes of its targets. Pure.

Attached to an HTTPRoute, GRPCRoute or Ingress (its routes) or a Gateway (every route served on
it); the route's own policy wins over its Gateway's, whole (as Envoy Gateway's SecurityPolicy).
Sections:

* ``basicAuth.users``: an htpasswd Secret of the policy's namespace (key ``.htpasswd``, else
  ``auth``); its ``{SHA}``/``{PLAIN}`` users are served by the engine's basic auth (401 for
  anyone else); users with hashes the engine cannot check are named in a warning;
* ``extAuth``: a Service port of the policy's namespace asked about each request (the IR's
  ``ExtAuth``: HTTP with ``path`` as prefix, or gRPC); its pool joins the translation's.
  With ``basicAuth`` too, both apply (credentials first);
* ``jwt``: a valid JWT of one of its providers (``podway.translate.jwt``); with other
  mechanisms too, each applies (the token first);
* ``oidc``: a browser logs in at an OpenID provider (``podway.translate.oidc``); with other
  mechanisms too, the login comes first;
* ``authorization``: ordered Allow/Deny rules by client CIDR, header, method and the claims of
  the request's JWT (``principal.jwt``: a provider of the policy's ``jwt`` and its claims), the
  first that matches deciding, else ``defaultAction`` (Deny unless Allow) — the IR's
  ``Authorization``.

Fail closed: a policy whose security section cannot be served as written — a key Podway does not
know (a mechanism not built yet), no Secret, no usable user, an invalid value elsewhere in the
policy — does not leave its targets open: their routes answer 403 (``Guard.refused``), and the
policy says why (``Accepted=False``/``Invalid``, or ``ResolvedRefs=False``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from ipaddress import ip_network

from podway.ir import (
    AccessRule,
    Authorization,
    BasicAuth,
    ClaimRule,
    ExtAuth,
    Filter,
    PoolProtocol,
)
from podway.model import ObjectRef, Secret, Service
from podway.model.policy import SecuritySpec, TrafficPolicy
from podway.model.snapshot import Snapshot
from podway.translate.core import htpasswd
from podway.translate.core.problems import Reason, Severity, quote
from podway.translate.jwt import Refused, jwt
from podway.translate.oidc import oidc
from podway.translate.pools import traffic_values as tv
from podway.translate.pools.backends import PoolSpec, find_port, http_pool

REFUSED_STATUS = 403
_KEYS = (".htpasswd", "auth")
_BUILT = ("jwt", "oidc", "basicAuth", "extAuth", "authorization")
_ACTIONS = {"Allow": True, "Deny": False}


@dataclass(frozen=True, slots=True)
class Guard:
    """What a policy does to the routes it reaches: ``filters`` to add, or ``refused``."""

    origin: ObjectRef
    filters: tuple[Filter, ...] = ()
    refused: bool = False
    pools: tuple[PoolSpec, ...] = ()  # the auth services the filters send to


@dataclass(slots=True)
class Found:
    """One policy's security, judged: the guard, its problems (reason, message, field,
    severity), and whether its references resolved (None: it has none)."""

    guard: Guard
    problems: list[tuple[Reason, str, str, Severity]] = field(default_factory=list)
    resolved: tuple[bool, Reason, str] | None = None

    def refuse(self, reason: Reason, message: str, where: str) -> Found:
        self.guard = Guard(self.guard.origin, refused=True)
        self.problems.append((reason, f"{message}; the routes it targets answer "
                              f"{REFUSED_STATUS} until it is fixed", where, Severity.ERROR))
        return self


def unknown_keys(spec: SecuritySpec) -> list[str]:
    """``spec.<key>`` paths of keys Podway does not know, in the section and its parts."""
    out = [f"security.{k}" for k in spec.model_extra or {}]
    if spec.basic_auth is not None:
        out += [f"security.basicAuth.{k}" for k in spec.basic_auth.model_extra or {}]
        users = spec.basic_auth.users
        if users is not None:
            out += [f"security.basicAuth.users.{k}" for k in users.model_extra or {}]
    if spec.authorization is not None:
        where = "security.authorization"
        out += [f"{where}.{k}" for k in spec.authorization.model_extra or {}]
        for i, rule in enumerate(spec.authorization.rules):
            out += [f"{where}.rules[{i}].{k}" for k in rule.model_extra or {}]
            p = rule.principal
            out += [f"{where}.rules[{i}].principal.{k}" for k in (p.model_extra or {} if p
                                                                 else {})]
            token = p.jwt if p else None
            out += [f"{where}.rules[{i}].principal.jwt.{k}" for k in (
                token.model_extra or {} if token else {})]
            for j, claim in enumerate(token.claims if token else ()):
                out += [f"{where}.rules[{i}].principal.jwt.claims[{j}].{k}"
                        for k in claim.model_extra or {}]
    if spec.jwt is not None:
        out += _unknown_jwt(spec)
    if spec.oidc is not None:
        out += _unknown_oidc(spec)
    if spec.ext_auth is not None:
        out += [f"security.extAuth.{k}" for k in spec.ext_auth.model_extra or {}]
        ref = spec.ext_auth.backend_ref
        if ref is not None:
            out += [f"security.extAuth.backendRef.{k}" for k in ref.model_extra or {}]
    return out


def _unknown_oidc(spec: SecuritySpec) -> list[str]:
    assert spec.oidc is not None
    at, o = "security.oidc", spec.oidc
    parts = [(at, o), (f"{at}.provider", o.provider), (f"{at}.clientSecret", o.client_secret),
             (f"{at}.cookieNames", o.cookie_names),
             (f"{at}.provider.backendRef", o.provider.backend_ref if o.provider else None)]
    return [f"{where}.{k}" for where, part in parts if part is not None
            for k in part.model_extra or {}]


def _unknown_jwt(spec: SecuritySpec) -> list[str]:
    assert spec.jwt is not None
    out = [f"security.jwt.{k}" for k in spec.jwt.model_extra or {}]
    for i, p in enumerate(spec.jwt.providers):
        at = f"security.jwt.providers[{i}]"
        parts = [(at, p), (f"{at}.localJWKS", p.local_jwks), (f"{at}.remoteJWKS", p.remote_jwks),
                 (f"{at}.localJWKS.valueRef", p.local_jwks.value_ref if p.local_jwks else None),
                 (f"{at}.remoteJWKS.backendRef",
                  p.remote_jwks.backend_ref if p.remote_jwks else None),
                 *((f"{at}.claimToHeaders[{j}]", c) for j, c in enumerate(p.claim_to_headers)),
                 (f"{at}.extractFrom", p.extract_from),
                 *((f"{at}.extractFrom.headers[{j}]", h) for j, h in enumerate(
                     p.extract_from.headers if p.extract_from else ()))]
        out += [f"{where}.{k}" for where, part in parts if part is not None
                for k in part.model_extra or {}]
    return out


def judge(policy: TrafficPolicy, snapshot: Snapshot, *, invalid: bool,
          oidc_key: bytes | None = None) -> Found | None:
    """The security of ``policy`` (None: it has no such section). ``invalid``: the policy has
    a bad value elsewhere, so nothing of it is applied — its targets are refused.
    ``oidc_key``: the key OIDC sessions are signed with (``podway.translate.oidc``)."""
    spec = policy.spec.security
    if spec is None:
        return None
    out = Found(Guard(policy.ref))
    if invalid:
        out.guard = Guard(policy.ref, refused=True)
        return out
    unknown = unknown_keys(spec)
    if unknown:
        return out.refuse(Reason.UNSUPPORTED_VALUE, f"{unknown[0]} is not served by Podway "
                          f"(served: {', '.join(_BUILT)})", f"spec.{unknown[0]}")
    if spec.basic_auth is None and spec.ext_auth is None and spec.authorization is None \
            and spec.jwt is None and spec.oidc is None:
        return out.refuse(Reason.INVALID, "security sets no mechanism", "spec.security")
    if spec.oidc is not None:
        out = _oidc(out, policy, snapshot, oidc_key)
        if out.guard.refused:
            return out
    if spec.authorization is not None:
        rules = _authorization(spec, policy)
        if isinstance(rules, str):
            return out.refuse(Reason.INVALID, rules, "spec.security.authorization")
        out.guard = Guard(policy.ref, filters=(*out.guard.filters, rules),
                          pools=out.guard.pools)
    if spec.jwt is not None:
        out = _jwt(out, policy, snapshot)
        if out.guard.refused:
            return out
    if spec.basic_auth is not None:
        out = _basic_auth(out, policy, snapshot)
    if spec.ext_auth is not None and not out.guard.refused:
        out = _ext_auth(out, policy, snapshot)
    return out


def _authorization(spec: SecuritySpec, policy: TrafficPolicy) -> Authorization | str:
    """The rules, or why they cannot be served (the policy is then invalid: refused)."""
    assert spec.authorization is not None
    given = spec.authorization
    if given.default_action not in _ACTIONS:
        return f"defaultAction {quote(given.default_action)} is neither Allow nor Deny"
    rules = []
    for i, rule in enumerate(given.rules):
        if rule.action not in _ACTIONS:
            return f"rules[{i}].action {quote(rule.action)} is neither Allow nor Deny"
        p = rule.principal
        cidrs = p.client_cidrs if p else ()
        for cidr in cidrs:
            try:
                ip_network(cidr, strict=False)
            except ValueError:
                return f"rules[{i}].principal.clientCIDRs: {quote(cidr)} is not a CIDR"
        headers = tuple((h.name.lower(), h.values) for h in (p.headers if p else ()))
        if any(not name or not values for name, values in headers):
            return f"rules[{i}].principal.headers: each needs a name and values"
        claims = _claims(spec, policy, i)
        if isinstance(claims, str):
            return claims
        rules.append(AccessRule(allow=_ACTIONS[rule.action], cidrs=cidrs, headers=headers,
                                methods=tuple(m.upper() for m in rule.methods), claims=claims))
    ns, name = policy.metadata.namespace, policy.metadata.name
    return Authorization(rules=tuple(rules), default_allow=_ACTIONS[given.default_action],
                         source=f"TrafficPolicy {ns}/{name}")


def _claims(spec: SecuritySpec, policy: TrafficPolicy, i: int) -> tuple[ClaimRule, ...] | str:
    """Rule ``i``'s JWT claims, or why they cannot be served: the provider must be one of the
    policy's own ``jwt`` providers (its valid token's payload is what is read)."""
    assert spec.authorization is not None
    p = spec.authorization.rules[i].principal
    token = p.jwt if p else None
    if token is None:
        return ()
    at = f"rules[{i}].principal.jwt"
    providers = {given.name for given in spec.jwt.providers} if spec.jwt else set()
    if token.provider not in providers:
        return (f"{at}.provider {quote(token.provider)} is not a provider of this policy's jwt "
                f"(it has: {', '.join(sorted(providers)) or 'no jwt section'})")
    if not token.claims:
        return f"{at} needs claims"
    out = []
    for j, claim in enumerate(token.claims):
        path = tuple(claim.name.split("."))
        if not claim.name or not all(path) or not claim.values \
                or claim.value_type not in ("String", "StringArray"):
            return (f"{at}.claims[{j}] needs a name, values and a valueType of String or "
                    "StringArray")
        ns, name = policy.metadata.namespace, policy.metadata.name
        out.append(ClaimRule(provider=f"{ns}/{name}/{token.provider}", claim=path,
                             values=claim.values, array=claim.value_type == "StringArray"))
    return tuple(out)


def _refused(out: Found, e: Refused) -> Found:
    """A refused OIDC or JWT section: Invalid, or (a reference that does not resolve) the
    ResolvedRefs reason its message names."""
    reason = Reason.INVALID
    if e.unresolved:
        reason = (Reason.REF_NOT_PERMITTED if "another namespace" in str(e)
                  else Reason.BACKEND_NOT_FOUND if str(e).startswith("Service")
                  else Reason.INVALID_SECRET if "has no key" in str(e)
                  else Reason.SECRET_NOT_FOUND)
        out.resolved = (False, reason, str(e))
    return out.refuse(reason, str(e), e.where)


def _oidc(out: Found, policy: TrafficPolicy, snapshot: Snapshot, key: bytes | None) -> Found:
    try:
        login, pool, found = oidc(policy, snapshot, key)
    except Refused as e:
        return _refused(out, e)
    out.resolved = (True, Reason.RESOLVED_REFS, found)
    out.guard = Guard(policy.ref, filters=(*out.guard.filters, login),
                      pools=(*out.guard.pools, pool))
    return out


def _jwt(out: Found, policy: TrafficPolicy, snapshot: Snapshot) -> Found:
    try:
        check, pools, found = jwt(policy, snapshot)
    except Refused as e:
        return _refused(out, e)
    found_text = "; ".join(found)
    out.resolved = (True, Reason.RESOLVED_REFS, found_text if out.resolved is None
                    else f"{out.resolved[2]}; {found_text}")
    out.guard = Guard(policy.ref, filters=(*out.guard.filters, check),
                      pools=(*out.guard.pools, *pools))
    return out


def _ext_auth(out: Found, policy: TrafficPolicy, snapshot: Snapshot) -> Found:
    spec = policy.spec.security.ext_auth if policy.spec.security else None
    assert spec is not None
    ns, where = policy.metadata.namespace, "spec.security.extAuth"
    ref = spec.backend_ref
    issues = tv.Issues()
    timeout = tv.duration_ms(spec.timeout, where=f"{where}.timeout", issues=issues) \
        if spec.timeout else 2000
    if spec.protocol not in ("HTTP", "GRPC") or ref is None or not ref.name or \
            ref.port is None or timeout is None:
        return out.refuse(Reason.INVALID, "extAuth needs protocol HTTP or GRPC, a backendRef "
                          "with a name and a port, and a valid timeout", where)
    if ref.namespace not in (None, ns):
        out.resolved = (False, Reason.REF_NOT_PERMITTED, f"Service {ref.namespace}/{ref.name} "
                        "is in another namespace; only the policy's own namespace is used")
        return out.refuse(Reason.REF_NOT_PERMITTED, out.resolved[2], f"{where}.backendRef")
    service = snapshot.get(Service, ns, ref.name)
    port = find_port(service, number=ref.port, protocol="TCP") if service else None
    if service is None or port is None:
        out.resolved = (False, Reason.BACKEND_NOT_FOUND, f"Service {ns}/{ref.name} port "
                        f"{ref.port} not found")
        return out.refuse(Reason.BACKEND_NOT_FOUND, out.resolved[2], f"{where}.backendRef")
    pool = http_pool(service, port)
    grpc = spec.protocol == "GRPC"
    if grpc and pool.settings.protocol not in (PoolProtocol.GRPC, PoolProtocol.HTTP2):
        pool = replace(pool, name=f"{pool.name}/grpc",
                       settings=replace(pool.settings, protocol=PoolProtocol.GRPC))
    check = ExtAuth(pool=pool.name, grpc=grpc, path_prefix="" if grpc else spec.path,
                    response_headers=spec.allowed_response_headers, timeout_ms=timeout)
    found = f"Service {ns}/{ref.name} port {ref.port}"
    out.resolved = (True, Reason.RESOLVED_REFS, found if out.resolved is None
                    else f"{out.resolved[2]}; {found}")
    out.guard = Guard(policy.ref, filters=(*out.guard.filters, check),
                      pools=(*out.guard.pools, pool))
    return out


def _basic_auth(out: Found, policy: TrafficPolicy, snapshot: Snapshot) -> Found:
    ns = policy.metadata.namespace
    where = "spec.security.basicAuth.users"
    ref = policy.spec.security.basic_auth.users if policy.spec.security and \
        policy.spec.security.basic_auth else None
    if ref is None or not ref.name:
        return out.refuse(Reason.INVALID, "basicAuth needs users (the htpasswd Secret)", where)
    if ref.namespace not in (None, ns):
        out.resolved = (False, Reason.REF_NOT_PERMITTED, f"Secret {ref.namespace}/{ref.name} is "
                        "in another namespace; only the policy's own namespace is read")
        return out.refuse(Reason.REF_NOT_PERMITTED, out.resolved[2], where)
    secret = snapshot.get(Secret, ns, ref.name)
    if secret is None:
        out.resolved = (False, Reason.SECRET_NOT_FOUND, f"Secret {ns}/{ref.name} not found")
        return out.refuse(Reason.SECRET_NOT_FOUND, out.resolved[2], where)
    data = next((d for d in (secret.get(k) for k in _KEYS) if d is not None), None)
    if data is None:
        out.resolved = (False, Reason.INVALID_SECRET, f"Secret {ns}/{ref.name} has no key "
                        f"{quote(_KEYS[0])} or {quote(_KEYS[1])} (an htpasswd file)")
        return out.refuse(Reason.INVALID_SECRET, out.resolved[2], where)
    users, unusable = htpasswd.users(htpasswd.lines(data.decode("utf-8", "replace")))
    if unusable:
        out.problems.append((Reason.UNSUPPORTED_VALUE, f"users {', '.join(unusable)} of Secret "
                             f"{ns}/{ref.name} cannot log in: their password hash is not {{SHA}} "
                             "(the only kind the engine checks; re-create them with htpasswd "
                             "-s)", where, Severity.WARNING))
    if not users:
        out.resolved = (False, Reason.INVALID_SECRET, f"Secret {ns}/{ref.name} has no user "
                        "whose password hash the engine can check ({SHA}, htpasswd -s)")
        return out.refuse(Reason.INVALID_SECRET, out.resolved[2], where)
    found = f"Secret {ns}/{ref.name}: {len(users)} users"
    out.resolved = (True, Reason.RESOLVED_REFS, found if out.resolved is None
                    else f"{out.resolved[2]}; {found}")
    out.guard = Guard(policy.ref, filters=(*out.guard.filters, BasicAuth(
        users=tuple(users), source=f"TrafficPolicy {ns}/{policy.metadata.name}, Secret "
        f"{ns}/{ref.name}")))
    return out
