"""Secrets that are not TLS pairs, and the ConfigMap values a policy reads, reach the
translator in controller mode: an ingress-nginx basic-auth Ingress whose htpasswd Secret is
``Opaque`` (as ingress-nginx users write it) is served with its users, not refused as "Secret
not found"; a JWT key set in a ConfigMap arrives whole; the Secret types Podway never reads
(service account tokens, Helm's release records …) are left out by the server."""

from __future__ import annotations

import base64

import yaml

from podway.ir import BasicAuth, Jwt
from podway.pipeline import State
from podway.sources.kube_kinds import UNREAD_SECRET_TYPES, spec_of
from podway.translate.jwt import JWKS_KEY
from tests.builders import ingress, meta

from .bed import GW, Bed, cluster_service, endpoint_slice, gateway, gateway_class, http_route
from .test_status import TRAFFIC_POLICY_CRD

HTPASSWD = "alice:{SHA}" + base64.b64encode(bytes.fromhex(
    "a94a8fe5ccb19ba61c4c0873d391e987982fbbd3")).decode() + "\n"  # password "test"


def _secret(name: str, type_: str, data: dict[str, str]) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta(name), "type": type_,
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def _basic_auth(state: State) -> list[BasicAuth]:
    return [f for listener in state.ir.listeners for host in listener.virtual_hosts
            for route in host.routes for f in route.filters if isinstance(f, BasicAuth)]


async def test_an_opaque_htpasswd_secret_serves_basic_auth(bed: Bed) -> None:
    bed.emu.put("services", cluster_service("web"))
    bed.emu.put("endpointslices", endpoint_slice("web", {"p1": "198.18.9.1"}))
    bed.emu.put("secrets", _secret("users", "Opaque", {"auth": HTPASSWD}))
    bed.emu.put("ingresses", ingress("shop", class_name="podway", annotations={
        "nginx.ingress.kubernetes.io/auth-type": "basic",
        "nginx.ingress.kubernetes.io/auth-secret": "users"}))
    await bed.start()
    state = await bed.until(lambda s: bool(_basic_auth(s)))
    assert [a.users for a in _basic_auth(state)] == [(("alice", HTPASSWD.split(":", 1)[1]
                                                       .strip()),)]


def test_the_secret_watch_leaves_out_only_types_podway_never_reads() -> None:
    spec = spec_of("Secret")
    assert spec is not None
    terms = spec.field_selector.split(",")
    assert terms == [f"type!={t}" for t in UNREAD_SECRET_TYPES]
    # Every type a translation reads stays in.
    for read in ("Opaque", "kubernetes.io/tls", "kubernetes.io/basic-auth"):
        assert f"type!={read}" not in terms


JWKS = '{"keys": [{"kty": "oct", "kid": "s", "k": "a2V5"}]}'


def _jwks(state: State) -> list[str]:
    return [p.jwks for listener in state.ir.listeners for host in listener.virtual_hosts
            for route in host.routes for f in route.filters if isinstance(f, Jwt)
            for p in f.providers]


async def test_a_jwt_key_set_from_a_configmap_arrives_whole(bed: Bed) -> None:
    """A TrafficPolicy's ``localJWKS.valueRef`` to a ConfigMap: the source keeps the value of
    ``jwks.json`` (it empties the values of keys nothing reads), so the provider gets its keys
    instead of being refused as an empty key set."""
    bed.emu.install_gateway_api()
    bed.emu.put("customresourcedefinitions", yaml.safe_load(TRAFFIC_POLICY_CRD.read_text()))
    bed.emu.put("gatewayclasses", gateway_class(), group=GW)
    bed.emu.put("gateways", gateway(), group=GW)
    bed.emu.put("httproutes", http_route("blog", "blog.test"), group=GW)
    bed.emu.put("services", cluster_service("web"))
    bed.emu.put("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("keys"),
                               "data": {JWKS_KEY: JWKS, "unread": "x"}})
    bed.emu.put("trafficpolicies", {
        "apiVersion": "podway.io/v1alpha1", "kind": "TrafficPolicy", "metadata": meta("jwt"),
        "spec": {"targetRefs": [{"group": GW, "kind": "HTTPRoute", "name": "blog"}],
                 "security": {"jwt": {"providers": [{"name": "keys", "localJWKS": {
                     "type": "ValueRef", "valueRef": {"kind": "ConfigMap", "name": "keys"}}}]}}}},
        group="podway.io")
    await bed.start()
    state = await bed.until(lambda s: bool(_jwks(s)))
    assert _jwks(state) == [JWKS]
