"""The access filters of a chosen route, as ``explain`` walks them (``_Walk`` mixes this in):
a client allowlist answers 403 to a ``--source-ip`` outside it; an OIDC login redirects a
request without its session cookies to the provider; basic authentication answers 401 to a
request without credentials of one of its users (``-H 'Authorization: Basic …'``); an
authorization rule on JWT claims reads the claims of the request's bearer token (its validity
is the engine's to judge) — naming the route and the policy that decided, and why.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import json
from collections.abc import Iterable
from dataclasses import replace
from urllib.parse import parse_qs

from podway.ir import (
    Authorization,
    AuthRequest,
    BasicAuth,
    ClaimRule,
    ClientAccess,
    ExtAuth,
    Jwt,
    JwtProvider,
    Oidc,
    Route,
)
from podway.model.base import ObjectRef
from podway.readers.explain.model import Mark, Outcome, OutcomeKind, Verdict
from podway.readers.explain.query import Query


class AccessChecks:
    """The checks; ``_Walk`` provides ``q``, ``step`` and ``_direct``."""

    q: Query

    def step(self, stage: str, mark: Mark, text: str) -> None:
        raise NotImplementedError

    def _direct(self, status: int, summary: str, fix: Iterable[ObjectRef]) -> Verdict:
        raise NotImplementedError

    def refused_by_filters(self, route: Route) -> Verdict | None:
        """The first of ``route``'s access filters that refuses the request, in the engine's
        order (client addresses, then credentials); None: they let it through."""
        for f in route.filters:
            if isinstance(f, ClientAccess) and (found := self._client_access(f, route)):
                return found
        for f in route.filters:
            if isinstance(f, Oidc) and (found := self._login(f, route)):
                return found
        for f in route.filters:
            if isinstance(f, Jwt) and (found := self._token(f, route)):
                return found
        for f in route.filters:
            if isinstance(f, Authorization) and (found := self._authorization(f, route)):
                return found
        for f in route.filters:
            if isinstance(f, BasicAuth) and (found := self._credentials(f, route)):
                return found
        return None

    def asked_first(self, route: Route, verdict: Verdict) -> Verdict:
        """``verdict`` when the route's external auth services allow the request; they may
        refuse it (their own 4xx) or fail (403), which explain cannot know: both outcomes."""
        services = [f.pool for f in route.filters if isinstance(f, ExtAuth | AuthRequest)]
        if not services:
            return verdict
        self.step("filter", Mark.INFO, f"{' and '.join(services)} decide first: a refusal is "
                  "their answer, an error, a timeout or no member 403; allowed, as below")
        refused = Outcome(kind=OutcomeKind.DIRECT, status=403)
        return replace(verdict, outcomes=(*verdict.outcomes, refused),
                       summary=f"{verdict.summary}, if {' and '.join(services)} allow it "
                       "(else 403 or their refusal)")

    def _authorization(self, auth: Authorization, route: Route) -> Verdict | None:
        """The first rule that matches decides (403 when it denies); a rule on the client
        address cannot be judged without ``--source-ip``."""
        headers = dict(self.q.headers)
        forwarded = _forwarded_session(route, headers)
        for i, rule in enumerate(auth.rules):
            if rule.cidrs and self.q.source_ip is None:
                self.step("filter", Mark.INFO, f"{auth.source or route.name} decides by client "
                          "address; give --source-ip to check one")
                return None
            if rule.claims and forwarded:
                self.step("filter", Mark.INFO, f"{auth.source or route.name} decides by the "
                          "claims of the session's access token, which explain cannot read")
                return None
            ip = ipaddress.ip_address(self.q.source_ip) if rule.cidrs and self.q.source_ip \
                else None
            if ((ip is None or any(ip in ipaddress.ip_network(c, strict=False)
                                   for c in rule.cidrs))
                    and all(headers.get(n) in v for n, v in rule.headers)
                    and (not rule.methods or self.q.method.upper() in rule.methods)
                    and all(_holds(c, headers.get("authorization", "")) for c in rule.claims)):
                allowed = rule.allow
                why = f"rule {i} of {auth.source or route.name}"
                break
        else:
            allowed, why = auth.default_allow, f"the default of {auth.source or route.name}"
        if allowed:
            self.step("filter", Mark.OK, f"authorization: allowed by {why}")
            return None
        text = f"{route.name} refuses the request: {why}"
        self.step("filter", Mark.FAIL, text)
        return self._direct(403, f"403 because {text}", (route.origin,))

    def _login(self, login: Oidc, route: Route) -> Verdict | None:
        """OIDC: a request without the session cookies is sent to log in (302); with them,
        their signature and expiry are the engine's to judge."""
        who = login.source or route.name
        path = self.q.path.split("?", 1)[0]
        if path == login.logout_path:
            self.step("filter", Mark.INFO, f"{path} is the logout path of {who}: the engine "
                      "clears the session cookies and redirects (302)")
            return Verdict(summary=f"302: logout of {who}", fix=(route.origin,),
                           outcomes=(Outcome(kind=OutcomeKind.REDIRECT, status=302),))
        if path == login.redirect_path:
            self.step("filter", Mark.INFO, f"{path} is where {who}'s provider sends the browser "
                      "back: the engine trades the code for tokens, sets the session cookies "
                      "and redirects (302) to the page first asked for")
            return Verdict(summary=f"302: the login callback of {who}", fix=(route.origin,),
                           outcomes=(Outcome(kind=OutcomeKind.REDIRECT, status=302),))
        if _has_session(login, dict(self.q.headers)):
            self.step("filter", Mark.INFO, f"OIDC login by {who}: the request carries session "
                      "cookies; if their signature holds and they have not expired it goes on, "
                      f"else it is sent to log in at {login.authorization_endpoint}")
            return None
        text = (f"{route.name} requires an OIDC login ({who}) and the request has no session "
                f"cookies: 302 to {login.authorization_endpoint}")
        self.step("filter", Mark.FAIL, text)
        return Verdict(summary=f"302 because {text} (from {route.origin})", fix=(route.origin,),
                       outcomes=(Outcome(kind=OutcomeKind.REDIRECT, status=302),))

    def _client_access(self, access: ClientAccess, route: Route) -> Verdict | None:
        """A route's client allowlist/denylist: 403 for a client outside it (when the query
        names the client's address), else a note on what decides."""
        allowed = ", ".join(access.allow) or "any address"
        denied = f" except {', '.join(access.deny)}" if access.deny else ""
        if self.q.source_ip is None:
            self.step("filter", Mark.INFO, f"only clients in {allowed}{denied} are served "
                      "(others get 403); give --source-ip to check one")
            return None
        ip = ipaddress.ip_address(self.q.source_ip)
        inside = (not access.allow or any(ip in ipaddress.ip_network(c) for c in access.allow))
        if inside and not any(ip in ipaddress.ip_network(c) for c in access.deny):
            return None
        text = (f"client {self.q.source_ip} is not among the clients {route.name} serves "
                f"({allowed}{denied})")
        self.step("filter", Mark.FAIL, text)
        return self._direct(403, f"403 because {text} (from {route.origin})", (route.origin,))

    def _token(self, auth: Jwt, route: Route) -> Verdict | None:
        """JWT authentication: 401 without a bearer token (unless optional); a token's
        validity (signature, expiry, issuer, audience) is the engine's to judge."""
        who = auth.source or route.name
        if _forwarded_session(route, dict(self.q.headers)):
            self.step("filter", Mark.INFO, f"JWT authentication by {who}: the OIDC session's "
                      "access token is the bearer token; its validity is the engine's to judge")
            return None
        if any(self._carries(p) for p in auth.providers):
            self.step("filter", Mark.INFO, f"JWT authentication by {who}: the token must be "
                      "valid for one of its providers (else 401; another audience 403)")
            return None
        if auth.optional:
            self.step("filter", Mark.OK, f"JWT authentication by {who}: optional, no token")
            return None
        text = (f"{route.name} requires a JWT ({who}) and the request has none "
                f"(give {_where(auth.providers[0]) if auth.providers else 'one'})")
        self.step("filter", Mark.FAIL, text)
        return self._direct(401, f"401 because {text} (from {route.origin})", (route.origin,))

    def _carries(self, provider: JwtProvider) -> bool:
        """Whether the request has a token where ``provider`` looks for one."""
        headers = dict(self.q.headers)
        if not (provider.from_headers or provider.from_cookies or provider.from_params):
            header = headers.get("authorization", "")
            return header[:7].lower() == "bearer " and bool(header[7:].strip())
        query = parse_qs(self.q.path.partition("?")[2])
        return (any(headers.get(name, "").startswith(prefix) and headers[name][len(prefix):]
                    for name, prefix in provider.from_headers)
                or bool(_cookies(headers.get("cookie", "")) & set(provider.from_cookies))
                or any(query.get(p) for p in provider.from_params))

    def _credentials(self, auth: BasicAuth, route: Route) -> Verdict | None:
        """Basic authentication: 401 unless the query's Authorization names a user of
        ``auth`` with the right password."""
        user = _user(auth, dict(self.q.headers).get("authorization", ""))
        if user is not None:
            self.step("filter", Mark.OK, f"basic authentication: user {user!r} of "
                      f"{auth.source or 'the route'}")
            return None
        text = (f"{route.name} requires basic authentication ({auth.source or 'its users'}) "
                "and the request has no valid credentials (give -H 'Authorization: Basic …')")
        self.step("filter", Mark.FAIL, text)
        return self._direct(401, f"401 because {text} (from {route.origin})", (route.origin,))


def _has_session(login: Oidc, headers: dict[str, str]) -> bool:
    """Whether the request carries ``login``'s session cookies (their signature and expiry are
    the engine's to judge)."""
    names = dict(login.cookie_names)
    wanted = {names.get("bearer_token", "BearerToken"), "OauthHMAC", "OauthExpires"}
    return wanted <= _cookies(headers.get("cookie", ""))


def _forwarded_session(route: Route, headers: dict[str, str]) -> bool:
    """The route's OIDC login forwards the session's access token as the bearer token, and
    the request has a session."""
    return any(isinstance(f, Oidc) and f.forward_token and _has_session(f, headers)
               for f in route.filters)


def _where(provider: JwtProvider) -> str:
    """Where ``provider`` takes a token from, as an ``explain`` option."""
    if provider.from_headers:
        name, prefix = provider.from_headers[0]
        return f"-H '{name}: {prefix}…'"
    if provider.from_cookies:
        return f"-H 'Cookie: {provider.from_cookies[0]}=…'"
    if provider.from_params:
        return f"?{provider.from_params[0]}=… in the URL"
    return "-H 'Authorization: Bearer …'"


def _cookies(header: str) -> set[str]:
    return {part.split("=", 1)[0].strip() for part in header.split(";") if "=" in part}


def _holds(claim: ClaimRule, header: str) -> bool:
    """Whether the bearer token of ``header`` (its payload, unverified: the engine checks
    the token) has ``claim``; no token: no."""
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or token.count(".") != 2:
        return False
    payload = token.split(".")[1]
    try:
        value: object = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError):
        return False
    for key in claim.claim:
        value = value.get(key) if isinstance(value, dict) else None
    if claim.array:
        return isinstance(value, list) and any(v in claim.values for v in value)
    return isinstance(value, str) and value in claim.values


def _user(auth: BasicAuth, header: str) -> str | None:
    """The user whose password the header carries, or None."""
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        name, _, password = base64.b64decode(token.strip(), validate=True).decode().partition(":")
    except (binascii.Error, ValueError):
        return None
    digest = "{SHA}" + base64.b64encode(
        hashlib.sha1(password.encode(), usedforsecurity=False).digest()).decode()
    return name if (name, digest) in auth.users else None
