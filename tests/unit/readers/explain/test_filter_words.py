"""``explain`` names every filter a route can carry, and follows the ingress-nginx ones (client
allowlists, required client certificates) as the engine does."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from podway.ir import (
    IR,
    BodyLimit,
    ClientAccess,
    Forward,
    Listener,
    Member,
    ObjectRef,
    Pool,
    RateLimit,
    Route,
    RouteMatch,
    TLSCertificate,
    TLSOptions,
    URLRewrite,
    VirtualHost,
    WeightedPool,
)
from podway.ir import ListenerProtocol as Protocol
from podway.readers.explain import OutcomeKind, explain, parse
from podway.readers.explain.words import filter_text


def test_access_rate_and_body_limits_read_as_words() -> None:
    """Client access, rate limits, body limits and regex rewrites each say what they do."""
    assert filter_text(ClientAccess(allow=("198.18.0.0/15",), deny=("198.18.1.0/24",))) == (
        "clients allowed: 198.18.0.0/15 except 198.18.1.0/24 (others get 403)")
    assert filter_text(ClientAccess()) == "clients allowed: any address (others get 403)"
    assert filter_text(RateLimit(requests=5, burst=25, status=503)) == (
        "rate limit per client address: 5 per 1000 ms, bursts of 25 (then 503)")
    assert filter_text(BodyLimit(max_bytes=1024)) == (
        "request bodies up to 1024 bytes (larger: 413)")
    assert filter_text(URLRewrite(pattern="^/a(.*)$", substitution="/\\1")) == (
        "rewrite: path matching ^/a(.*)$ → /\\1")


def _shop(route: Route, protocol: Protocol = Protocol.HTTP, **kw: object) -> IR:
    vhost = VirtualHost(name="shop", hostname="shop.test", routes=(route,))
    listener = Listener(name="l", address="0.0.0.0", port=443 if protocol is Protocol.HTTPS
                        else 80, protocol=protocol, virtual_hosts=(vhost,),
                        **kw)  # type: ignore[arg-type]
    pool = Pool(name="web", members=(Member(address="10.0.0.1", port=80),))
    return IR(listeners=(listener,), pools=MappingProxyType({"web": pool}))


ING = ObjectRef("Ingress", "shop", "web")
ROUTE = Route(name="r", origin=ING, match=RouteMatch(), action=Forward(
    backends=(WeightedPool(pool="web"),)),
    filters=(ClientAccess(allow=("198.18.0.0/15",), deny=("198.18.9.0/24",)),))


def test_client_access_answers_403_to_a_client_outside_it() -> None:
    """A --source-ip outside the allowlist, or in the denylist, gets 403; inside is served;
    without one the walk says what decides and follows the route."""
    for source, kind in (("198.18.1.1", OutcomeKind.SERVED), ("198.18.9.9", OutcomeKind.DIRECT),
                         ("192.0.2.1", OutcomeKind.DIRECT), (None, OutcomeKind.SERVED)):
        found = explain(_shop(ROUTE), parse("http://shop.test/", source_ip=source))
        assert [o.kind for o in found.verdict.outcomes] == [kind], source
        if kind is OutcomeKind.DIRECT:
            assert found.verdict.outcomes[0].status == 403


def test_a_required_client_certificate_fails_the_handshake() -> None:
    """A chain that requires client certificates resets a client without one; optional does
    not."""
    plain = replace(ROUTE, filters=())
    for required, kind in ((True, OutcomeKind.RESET), (False, OutcomeKind.SERVED)):
        cert = TLSCertificate(name="secret/shop/tls", hostnames=("shop.test",), cert_pem="C",
                              key_pem="K", options=TLSOptions(client_ca_pem="CA",
                                                              client_ca="secret/shop/ca",
                                                              client_required=required))
        found = explain(_shop(plain, Protocol.HTTPS, certificates=(cert,)),
                        parse("https://shop.test/"))
        assert [o.kind for o in found.verdict.outcomes] == [kind], required


def test_basic_auth_answers_401_without_a_user_and_names_who_asked() -> None:
    """No Authorization, a wrong password or an unknown user: 401 naming the route, its Secret
    and its Ingress; a user's own password: served (the step names the user)."""
    import base64
    import hashlib

    from podway.ir import BasicAuth

    digest = "{SHA}" + base64.b64encode(hashlib.sha1(b"pw").digest()).decode()
    auth = BasicAuth(users=(("alice", digest),), realm="x", source="Secret shop/htpasswd")
    assert filter_text(auth) == ("basic authentication: 1 users of Secret shop/htpasswd, realm "
                                 "'x' (others get 401)")
    route = replace(ROUTE, filters=(auth,))

    def basic(text: str) -> list[str]:
        return ["Authorization: Basic " + base64.b64encode(text.encode()).decode()]

    for headers in ([], basic("alice:wrong"), basic("bob:pw"), ["Authorization: Bearer x"]):
        found = explain(_shop(route), parse("http://shop.test/", headers=headers))
        assert [(o.kind, o.status) for o in found.verdict.outcomes] == [
            (OutcomeKind.DIRECT, 401)], headers
        assert "Secret shop/htpasswd" in found.verdict.summary
        assert found.verdict.fix == (ING,)
    found = explain(_shop(route), parse("http://shop.test/", headers=basic("alice:pw")))
    assert [o.kind for o in found.verdict.outcomes] == [OutcomeKind.SERVED]
    assert any("user 'alice'" in s.text for s in found.steps)


def test_external_auth_reads_as_words() -> None:
    from podway.ir import ExtAuth

    assert filter_text(ExtAuth(pool="pool/app/authz/80", path_prefix="/check")) == (
        "external authorization by pool/app/authz/80 (HTTP, path prefix /check): its refusal "
        "is the answer, an error or timeout 403")
    assert "gRPC ext_authz" in filter_text(ExtAuth(pool="p", grpc=True))


def test_authorization_rules_decide_as_the_engine_does() -> None:
    """First match decides: the Deny on a header, then Allow GET from a CIDR, default Deny; a
    CIDR rule without --source-ip is said, not guessed."""
    from podway.ir import AccessRule, Authorization

    auth = Authorization(rules=(AccessRule(allow=False, headers=(("x-block", ("yes",)),)),
                                AccessRule(allow=True, cidrs=("10.0.0.0/8",),
                                           methods=("GET",))),
                         source="TrafficPolicy shop/p")
    assert filter_text(auth) == (
        "authorization by TrafficPolicy shop/p: first match decides (deny x-block is yes; "
        "allow client in 10.0.0.0/8 and method GET); otherwise refused (403)")
    route = replace(ROUTE, filters=(auth,))
    cases = ((["X-Block: yes"], "GET", "10.1.1.1", 403), ([], "GET", "10.1.1.1", None),
             ([], "POST", "10.1.1.1", 403), ([], "GET", "192.0.2.1", 403), ([], "GET", None, None))
    for headers, method, source, status in cases:
        found = explain(_shop(route), parse("http://shop.test/", headers=headers, method=method,
                                            source_ip=source))
        outcome = found.verdict.outcomes[0]
        if status is None:
            assert outcome.kind is OutcomeKind.SERVED, (headers, method, source)
        else:
            assert (outcome.kind, outcome.status) == (OutcomeKind.DIRECT, status)
            assert "TrafficPolicy shop/p" in found.verdict.summary


def test_jwt_answers_401_without_a_token_and_auth_url_decides_first() -> None:
    """A JWT route: no bearer token is 401 naming the policy (unless optional); a token is
    the engine's to judge (served, said so). An auth-url route: both outcomes, the auth
    service's word first."""
    from podway.ir import AuthRequest, Jwt, JwtProvider

    jwt = Jwt(name="shop/p", providers=(JwtProvider(name="shop/p/idp",
                                                    issuer="https://idp.test"),),
              source="TrafficPolicy shop/p")
    assert "https://idp.test" in filter_text(jwt)
    route = replace(ROUTE, filters=(jwt,))
    for headers in ([], ["Authorization: Basic eDp5"]):
        found = explain(_shop(route), parse("http://shop.test/", headers=headers))
        assert [(o.kind, o.status) for o in found.verdict.outcomes] == [
            (OutcomeKind.DIRECT, 401)], headers
        assert "TrafficPolicy shop/p" in found.verdict.summary
    found = explain(_shop(route), parse("http://shop.test/", headers=["Authorization: Bearer t"]))
    assert [o.kind for o in found.verdict.outcomes] == [OutcomeKind.SERVED]
    optional = replace(ROUTE, filters=(replace(jwt, optional=True),))
    found = explain(_shop(optional), parse("http://shop.test/"))
    assert [o.kind for o in found.verdict.outcomes] == [OutcomeKind.SERVED]
    check = AuthRequest(pool="pool/auth/oauth2/80", authority="oauth2.auth", path="/oauth2/auth",
                        signin="https://login.test/start", source="auth-url http://oauth2.auth")
    assert "GET http://oauth2.auth/oauth2/auth" in filter_text(check)
    found = explain(_shop(replace(ROUTE, filters=(check,))), parse("http://shop.test/"))
    assert [o.kind for o in found.verdict.outcomes] == [OutcomeKind.SERVED, OutcomeKind.DIRECT]


def test_oidc_sends_a_request_without_a_session_to_log_in() -> None:
    """No session cookies: 302 to the provider, naming the policy; with them: the engine's to
    judge; the callback and logout paths are the engine's own answers."""
    from podway.ir import Oidc

    login = Oidc(name="shop/p", pool="idp", authorization_endpoint="https://idp.test/auth",
                 token_endpoint="https://idp.test/token", client_id="shop",
                 redirect_uri="https://shop.test/cb", redirect_path="/cb", logout_path="/out",
                 source="TrafficPolicy shop/p")
    assert "https://idp.test/auth" in filter_text(login)
    route = replace(ROUTE, filters=(login,))
    found = explain(_shop(route), parse("http://shop.test/a"))
    assert [(o.kind, o.status) for o in found.verdict.outcomes] == [(OutcomeKind.REDIRECT, 302)]
    assert "TrafficPolicy shop/p" in found.verdict.summary
    session = ["Cookie: BearerToken=x; OauthHMAC=y; OauthExpires=1"]
    found = explain(_shop(route), parse("http://shop.test/a", headers=session))
    assert [o.kind for o in found.verdict.outcomes] == [OutcomeKind.SERVED]
    for path, words in (("/cb", "callback"), ("/out", "logout")):
        found = explain(_shop(route), parse(f"http://shop.test{path}"))
        assert [(o.kind, o.status) for o in found.verdict.outcomes] == [
            (OutcomeKind.REDIRECT, 302)]
        assert words in found.verdict.summary


def test_claim_rules_read_the_bearer_tokens_claims() -> None:
    """A rule on a JWT claim matches the claims of the request's bearer token (its validity
    is the engine's to judge); without a token it matches nothing."""
    import base64
    import json

    from podway.ir import AccessRule, Authorization, ClaimRule

    claim = ClaimRule(provider="shop/p/idp", claim=("org", "groups"), values=("admin",),
                      array=True)
    auth = Authorization(rules=(AccessRule(allow=True, claims=(claim,)),),
                         source="TrafficPolicy shop/p")
    assert "org.groups holds admin" in filter_text(auth)
    route = replace(ROUTE, filters=(auth,))

    def token(payload: object) -> str:
        body = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
        return f"Authorization: Bearer e30.{body}.sig"

    for headers, served in (([token({"org": {"groups": ["x", "admin"]}})], True),
                            ([token({"org": {"groups": ["x"]}})], False),
                            ([token({"org": {"groups": "admin"}})], False), ([], False)):
        found = explain(_shop(route), parse("http://shop.test/", headers=headers))
        outcome = found.verdict.outcomes[0]
        assert (outcome.kind is OutcomeKind.SERVED) is served, headers
        if not served:
            assert outcome.status == 403
            assert "TrafficPolicy shop/p" in found.verdict.summary


def test_jwt_looks_for_the_token_where_its_provider_does() -> None:
    from podway.ir import Jwt, JwtProvider

    jwt = Jwt(name="shop/p", providers=(JwtProvider(name="shop/p/idp", from_cookies=("s",)),),
              source="TrafficPolicy shop/p")
    route = replace(ROUTE, filters=(jwt,))
    for headers in ([], ["Authorization: Bearer t"], ["Cookie: other=t"]):
        found = explain(_shop(route), parse("http://shop.test/", headers=headers))
        assert [(o.kind, o.status) for o in found.verdict.outcomes] == [
            (OutcomeKind.DIRECT, 401)], headers
        assert "Cookie: s=" in found.verdict.summary
    found = explain(_shop(route), parse("http://shop.test/", headers=["Cookie: a=1; s=t"]))
    assert [o.kind for o in found.verdict.outcomes] == [OutcomeKind.SERVED]


def test_an_oidc_session_forwarding_its_token_satisfies_the_jwt_check() -> None:
    """A login that forwards the session's access token: with session cookies the JWT filter
    sees that token (the engine judges it) and claim rules cannot be read by explain; without
    them, the login's 302 comes first."""
    from podway.ir import AccessRule, Authorization, ClaimRule, Jwt, JwtProvider, Oidc

    login = Oidc(name="shop/p", pool="idp", authorization_endpoint="https://idp.test/auth",
                 token_endpoint="https://idp.test/token", client_id="shop",
                 redirect_uri="https://shop.test/cb", redirect_path="/cb", logout_path="/out",
                 forward_token=True, source="TrafficPolicy shop/p")
    jwt = Jwt(name="shop/p", providers=(JwtProvider(name="shop/p/idp"),),
              source="TrafficPolicy shop/p")
    claim = ClaimRule(provider="shop/p/idp", claim=("groups",), values=("admin",), array=True)
    auth = Authorization(rules=(AccessRule(allow=True, claims=(claim,)),),
                         source="TrafficPolicy shop/p")
    route = replace(ROUTE, filters=(login, jwt, auth))
    session = ["Cookie: BearerToken=x; OauthHMAC=y; OauthExpires=1"]
    found = explain(_shop(route), parse("http://shop.test/a", headers=session))
    assert [o.kind for o in found.verdict.outcomes] == [OutcomeKind.SERVED]
    found = explain(_shop(route), parse("http://shop.test/a"))
    assert [(o.kind, o.status) for o in found.verdict.outcomes] == [(OutcomeKind.REDIRECT, 302)]
    no_forward = replace(route, filters=(replace(login, forward_token=False), jwt, auth))
    found = explain(_shop(no_forward), parse("http://shop.test/a", headers=session))
    assert [(o.kind, o.status) for o in found.verdict.outcomes] == [(OutcomeKind.DIRECT, 401)]
