"""OIDC login in Envoy's config: one oauth2 filter per policy, present (switched off) only on the
managers of listeners whose routes use it and switched on by those routes alone; its config by
ECDS and its secrets by SDS (never inline, redacted in dumps); a change of the policy changes
its ECDS resource and secrets, never the listener (no drain)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from podway.envoy import types
from podway.envoy.config import Builder, build
from podway.envoy.config.jwt import METADATA_NAMESPACE
from podway.envoy.xds.dump import files
from podway.ir import AccessRule, Authorization, ClaimRule, Oidc

from .helpers import http_listener, ir, pool, route, vhost

LOGIN = Oidc(name="shop/p", pool="idp", authorization_endpoint="https://idp.test/authorize",
             token_endpoint="https://idp.test/token", client_id="shop",
             redirect_uri="https://shop.test/oauth2/callback", redirect_path="/oauth2/callback",
             logout_path="/logout", client_secret="hush", hmac_secret="c2Vzc2lvbg==",
             scopes=("openid",), cookie_names=(("bearer_token", "At"),))
FILTER = "podway.oauth2/shop/p"


def _dump(model: Any) -> dict[str, Any]:
    return {name: json.loads(text) for name, text in files(build(model)).items()}


def _model(login: Oidc = LOGIN) -> Any:
    guarded = replace(route("r/admin", "/admin", "p"), filters=(login,))
    return ir((http_listener(vhost("shop.test", guarded, route("r/open", "/", "p"))),
               replace(http_listener(vhost("plain.test", route("r/x", "/", "p"))),
                       name="plain", port=8081)), pool("p", 1), pool("idp", 1))


def test_the_filter_is_only_on_the_listener_that_uses_it_and_on_only_for_its_route() -> None:
    out = _dump(_model())
    listeners = {item["name"]: json.dumps(item) for item in out["listeners.json"]}
    assert FILTER in listeners["listener/http"]
    assert FILTER not in listeners["plain"]
    manager = next(f["typed_config"] for item in out["listeners.json"]
                   if item["name"] == "listener/http"
                   for chain in [item.get("default_filter_chain") or {},
                                 *item.get("filter_chains", ())]
                   for f in chain.get("filters", ()))
    names = [f["name"] for f in manager["http_filters"]]
    item = manager["http_filters"][names.index(FILTER)]
    assert item["disabled"] is True
    assert "config_discovery" in item
    assert names.index(FILTER) < names.index("podway.jwt_authn") \
        < names.index("podway.rbac.authorization")
    routes = {r["name"]: r for table in out["routes.json"] for v in table["virtual_hosts"]
              for r in v["routes"]}
    assert FILTER in routes["r/admin"]["typed_per_filter_config"]
    assert FILTER not in routes["r/open"].get("typed_per_filter_config", {})


def test_secrets_travel_by_sds_and_are_redacted() -> None:
    built = build(_model())
    config = built[types.EXTENSION][FILTER].message
    text = str(config)
    assert "hush" not in text
    assert "oidc/shop/p/client" in text
    assert "oidc/shop/p/hmac" in text
    secrets = built[types.SECRET]
    assert {"oidc/shop/p/client", "oidc/shop/p/hmac"} <= set(secrets)
    assert "hush" in str(secrets["oidc/shop/p/client"].message)
    dumped = "".join(files(built).values())
    assert "hush" not in dumped
    assert "c2Vzc2lvbg==" not in dumped
    assert "podway.oauth2/shop/p" in files(built)["extensions.json"]


def test_a_policy_change_keeps_the_listener() -> None:
    builder = Builder()
    before = builder.build(_model())
    after = builder.build(_model(replace(LOGIN, scopes=("openid", "email"),
                                         client_secret="new")))
    assert {n: r.digest for n, r in before[types.LISTENER].items()} == \
        {n: r.digest for n, r in after[types.LISTENER].items()}
    assert before[types.EXTENSION][FILTER].digest != after[types.EXTENSION][FILTER].digest
    assert before[types.SECRET]["oidc/shop/p/client"].digest != \
        after[types.SECRET]["oidc/shop/p/client"].digest


def test_a_claim_rule_reads_the_jwt_filters_metadata() -> None:
    rule = AccessRule(allow=True, claims=(ClaimRule(provider="shop/p/idp", claim=("org", "g"),
                                                    values=("a", "b"), array=True),))
    guarded = replace(route("r/admin", "/admin", "p"),
                      filters=(Authorization(rules=(rule,)),))
    out = _dump(ir((http_listener(vhost("shop.test", guarded)),), pool("p", 1)))
    (table,) = out["routes.json"]
    per_route = table["virtual_hosts"][0]["routes"][0]["typed_per_filter_config"]
    policy = per_route["podway.rbac.authorization"]["rbac"]["rules"]["policies"]["rule-0"]
    matchers = json.dumps(policy)
    assert METADATA_NAMESPACE in matchers
    assert '"path": [{"key": "shop/p/idp"}, {"key": "org"}, {"key": "g"}]' in matchers
    assert '"list_match": {"one_of": {"string_match": {"exact": "a"}}}' in matchers
