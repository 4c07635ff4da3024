"""TrafficPolicy ``security.oidc`` and authorization by JWT claim, translated: what reaches the
route, what refuses it (403) with which condition, and the session key's derivation."""

from __future__ import annotations

import base64
import json

import pytest

from podway.ir import Authorization, ClaimRule, DirectResponse, Oidc, Route
from podway.ir.dump import to_data, to_yaml
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.model.policy import TrafficPolicy
from podway.translate import Result, TranslateOptions, translate
from podway.translate.oidc import session_key
from tests import builders

from .test_security_policy import conditions, routes

KEY = b"k" * 32
SERVICES = builders.manifest(
    builders.gateway_class(), builders.gateway("edge", 8080, namespace="shop"),
    builders.service("web", 80, None, namespace="shop", protocol=None),
    builders.service("idp", 443, None, namespace="shop", protocol=None))
BASE = "---\n".join([SERVICES, builders.manifest(builders.http_route(
    "admin", "admin.test", namespace="shop", parent_namespace="shop"))])
CLIENT = ("apiVersion: v1\nkind: Secret\nmetadata: {name: client, namespace: shop}\n"
          "stringData: {client-secret: hush}\n")


def oidc(**changes: object) -> dict[str, object]:
    out: dict[str, object] = {
        "provider": {"issuer": "https://idp.test", "backendRef": {"name": "idp", "port": 443},
                     "authorizationEndpoint": "https://idp.test/authorize",
                     "tokenEndpoint": "https://idp.test/token"},
        "clientID": "shop", "clientSecret": {"name": "client"}, "scopes": ["email", "openid"]}
    out.update(changes)
    return out


def run(security: dict[str, object], *, key: bytes | None = KEY, uid: str = "u1",
        extra: str = CLIENT) -> Result:
    policy = (f"apiVersion: podway.io/v1alpha1\nkind: TrafficPolicy\nmetadata: {{name: p, "
              f"namespace: shop, uid: {uid}}}\nspec:\n  targetRefs: [{{group: "
              "gateway.networking.k8s.io, kind: HTTPRoute, name: admin}]\n"
              f"  security: {json.dumps(security)}\n")
    loaded = load_text("---\n".join([BASE, policy, extra]))
    assert not loaded.errors, loaded.errors
    return translate(Snapshot.of_objects(loaded.objects),
                     TranslateOptions(address="198.18.0.1", oidc_key=key))


def login(route: Route) -> Oidc:
    (found,) = [f for f in route.filters if isinstance(f, Oidc)]
    return found


def refused(result: Result) -> bool:
    action = routes(result)["admin.test"].action
    return isinstance(action, DirectResponse) and action.status == 403


def test_oidc_reaches_the_route_with_its_pool_and_secrets() -> None:
    result = run({"oidc": oidc()})
    found = login(routes(result)["admin.test"])
    assert found.client_secret == "hush"
    assert len(base64.b64decode(found.hmac_secret)) == 32
    assert found.scopes == ("openid", "email")
    assert (found.redirect_path, found.logout_path) == ("/oauth2/callback", "/logout")
    assert found.redirect_uri.startswith("%REQ(x-forwarded-proto)%://%REQ(:authority)%")
    pool = result.ir.pools[found.pool]
    assert pool.settings.upstream_tls is not None
    assert pool.settings.upstream_tls.sni == "idp.test"  # https: TLS, the URL's host
    assert conditions(result, "p") == [("Accepted", "True", "Accepted"),
                                       ("ResolvedRefs", "True", "ResolvedRefs")]
    # The secrets are never dumped.
    assert "hush" not in to_yaml(result.ir)
    assert found.hmac_secret not in to_yaml(result.ir)
    wire = to_data(found, secrets=True)  # what an engine taking the IR is sent: none serves
    assert "client_secret" not in wire  # OIDC, so none gets its secrets
    assert "hmac_secret" not in wire


def test_the_session_key_is_per_policy_and_stable() -> None:
    one = login(routes(run({"oidc": oidc()}))["admin.test"]).hmac_secret
    policy = TrafficPolicy.model_validate({"metadata": {"name": "p", "namespace": "shop",
                                                        "uid": "u1"}})
    assert one == session_key(KEY, policy)
    again = login(routes(run({"oidc": oidc()}))["admin.test"]).hmac_secret
    recreated = login(routes(run({"oidc": oidc()}, uid="u2"))["admin.test"]).hmac_secret
    other_key = login(routes(run({"oidc": oidc()}, key=b"x" * 32))["admin.test"]).hmac_secret
    assert one == again
    assert len({one, recreated, other_key}) == 3


@pytest.mark.parametrize(("security", "extra", "key", "reason"), [
    ({"oidc": oidc(clientSecret={"name": "missing"})}, CLIENT, KEY, "SecretNotFound"),
    ({"oidc": oidc()}, CLIENT.replace("client-secret", "other"), KEY, "InvalidSecret"),
    ({"oidc": oidc(clientSecret={"name": "client", "namespace": "x"})}, CLIENT, KEY,
     "RefNotPermitted"),
    ({"oidc": oidc(provider={"issuer": "https://idp.test",
                             "authorizationEndpoint": "https://idp.test/a",
                             "tokenEndpoint": "https://idp.test/t",
                             "backendRef": {"name": "nope", "port": 443}})}, CLIENT, KEY,
     "BackendNotFound"),
])
def test_a_missing_reference_refuses_with_resolved_refs_false(
        security: dict[str, object], extra: str, key: bytes, reason: str) -> None:
    result = run(security, extra=extra, key=key)
    assert refused(result)
    assert ("ResolvedRefs", "False", reason) in conditions(result, "p")


@pytest.mark.parametrize(("security", "key", "words"), [
    ({"oidc": oidc(provider={"issuer": "https://idp.test",
                             "backendRef": {"name": "idp", "port": 443}})}, KEY,
     "discovery document"),
    ({"oidc": oidc(provider={"issuer": "https://idp.test", "authorizationEndpoint": "ftp://x",
                             "tokenEndpoint": "https://idp.test/t",
                             "backendRef": {"name": "idp", "port": 443}})}, KEY,
     "not an http(s) URL"),
    ({"oidc": oidc(provider={"issuer": "https://idp.test",
                             "authorizationEndpoint": "https://idp.test/a",
                             "tokenEndpoint": "https://idp.test/t"})}, KEY, "backendRef"),
    ({"oidc": oidc(redirectURL="https://shop.test")}, KEY, "redirectURL"),
    ({"oidc": oidc(redirectURL="https://shop.test/cb?x=1")}, KEY, "redirectURL"),
    ({"oidc": oidc(logoutPath="/oauth2/callback")}, KEY, "logoutPath"),
    ({"oidc": oidc(clientID="")}, KEY, "clientID"),
    ({"oidc": oidc(cookieNames={"accessToken": "a b"})}, KEY, "cookie"),
    ({"oidc": oidc(denyRedirect=True)}, KEY, "denyRedirect is not served"),
    ({"oidc": oidc()}, None, "no OIDC session key"),
])
def test_what_cannot_be_served_refuses_never_opens(security: dict[str, object],
                                                   key: bytes | None, words: str) -> None:
    result = run(security, key=key)
    assert refused(result)
    (accepted, *_) = conditions(result, "p")
    assert accepted[:2] == ("Accepted", "False")
    assert any(words in p.message for p in result.problems), result.problems


def test_claim_rules_name_a_provider_of_the_policy() -> None:
    jwt = {"providers": [{"name": "shop", "localJWKS": {
        "type": "Inline", "inline": json.dumps({"keys": [{"kty": "oct", "k": "AAAA"}]})}}]}
    rule = {"action": "Allow", "principal": {"jwt": {"provider": "shop", "claims": [
        {"name": "org.groups", "valueType": "StringArray", "values": ["admin"]}]}}}
    result = run({"jwt": jwt, "authorization": {"rules": [rule]}})
    (auth,) = [f for f in routes(result)["admin.test"].filters if isinstance(f, Authorization)]
    assert auth.rules[0].claims == (ClaimRule(provider="shop/p/shop", claim=("org", "groups"),
                                              values=("admin",), array=True),)
    for bad in ({"provider": "other", "claims": rule["principal"]["jwt"]["claims"]},  # type: ignore[index]
                {"provider": "shop", "claims": []},
                {"provider": "shop", "claims": [{"name": "x", "values": ["a"],
                                                 "valueType": "Number"}]},
                {"provider": "shop", "claims": [{"name": "x", "values": ["a"]}], "scopes": ["a"]}):
        result = run({"jwt": jwt, "authorization": {"rules": [
            {"action": "Allow", "principal": {"jwt": bad}}]}})
        assert refused(result), bad
    # No jwt section at all: the claim can never be read; refused, not "never matches".
    assert refused(run({"authorization": {"rules": [rule]}}))


def test_jwt_locations_and_recompute_route_reach_the_provider() -> None:
    from podway.ir import Jwt

    keys = {"type": "Inline", "inline": json.dumps({"keys": [{"kty": "oct", "k": "AAAA"}]})}
    given = {"name": "shop", "localJWKS": keys, "recomputeRoute": True, "extractFrom": {
        "headers": [{"name": "X-Token", "valuePrefix": "Token "}], "cookies": ["session"],
        "params": ["jwt"]}}
    (check,) = [f for f in routes(run({"jwt": {"providers": [given]}}))["admin.test"].filters
                if isinstance(f, Jwt)]
    (provider,) = check.providers
    assert provider.from_headers == (("x-token", "Token "),)
    assert (provider.from_cookies, provider.from_params) == (("session",), ("jwt",))
    assert provider.recompute_route
    for bad in ({}, {"cookies": ["a b"]}, {"headers": [{"valuePrefix": "x"}]},
                {"cookies": ["s"], "body": True}):
        assert refused(run({"jwt": {"providers": [{**given, "extractFrom": bad}]}})), bad


def test_a_client_secret_edit_reaches_the_route_incrementally() -> None:
    """The Secret changes: the incremental translation equals a full one, and the login's
    secret is the new one; the Secret removed: refused."""
    from podway.translate import IncrementalTranslator

    options = TranslateOptions(address="198.18.0.1", oidc_key=KEY)
    policy = ("apiVersion: podway.io/v1alpha1\nkind: TrafficPolicy\nmetadata: {name: p, "
              "namespace: shop, uid: u1}\nspec:\n  targetRefs: [{group: "
              "gateway.networking.k8s.io, kind: HTTPRoute, name: admin}]\n"
              f"  security: {json.dumps({'oidc': oidc()})}\n")
    inc = IncrementalTranslator(options)
    inc.update(Snapshot.of_objects(load_text("---\n".join([BASE, policy, CLIENT])).objects))
    for extra, secret in ((CLIENT.replace("hush", "quiet"), "quiet"), ("", None)):
        snapshot = Snapshot.of_objects(load_text("---\n".join([BASE, policy, extra])).objects)
        result = inc.update(snapshot)
        assert result == translate(snapshot, options)
        if secret is None:
            assert refused(result)
        else:
            assert login(routes(result)["admin.test"]).client_secret == secret


def test_a_redirect_path_no_covered_route_answers_is_a_warning() -> None:
    """The policy's route serves /app only: the provider's redirect to /oauth2/callback and the
    logout path would reach no route (404), so the login could never complete — said on the
    policy (a warning: the route itself is still guarded). A route covering them: no word."""
    narrow = ("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: "
              "admin, namespace: shop}\nspec:\n  parentRefs: [{name: edge, namespace: shop}]\n"
              "  hostnames: [admin.test]\n  rules:\n  - matches: [{path: {type: PathPrefix, "
              "value: /app}}]\n    backendRefs: [{name: web, port: 80}]\n")
    policy = ("apiVersion: podway.io/v1alpha1\nkind: TrafficPolicy\nmetadata: {name: p, "
              "namespace: shop, uid: u1}\nspec:\n  targetRefs: [{group: "
              "gateway.networking.k8s.io, kind: HTTPRoute, name: admin}]\n"
              f"  security: {json.dumps({'oidc': oidc()})}\n")
    loaded = load_text("---\n".join([SERVICES, narrow, policy, CLIENT]))
    assert not loaded.errors, loaded.errors
    result = translate(Snapshot.of_objects(loaded.objects),
                       TranslateOptions(address="198.18.0.1", oidc_key=KEY))
    warned = sorted(p.field for p in result.problems if p.ref.kind == "TrafficPolicy")
    assert warned == ["spec.security.oidc.logoutPath", "spec.security.oidc.redirectURL"], \
        result.problems
    assert all("no route (404)" in p.message for p in result.problems
               if p.ref.kind == "TrafficPolicy")
    assert not [p for p in run({"oidc": oidc()}).problems if p.ref.kind == "TrafficPolicy"]
