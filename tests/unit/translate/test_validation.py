"""What Envoy would refuse is caught by the translator: as a problem on its object, the rest
keeps serving; messages never copy whole inputs."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from podway.model import EndpointSlice, Snapshot
from podway.model.loader import load_text
from podway.translate import IncrementalTranslator, Reason, Severity, TranslateOptions, translate
from podway.translate.core.addresses import address_problem
from podway.translate.core.problems import quote
from podway.translate.core.tls import _check_pair, certificate_from_secret
from tests import builders
from tests.certs import EXPIRED_CERT, EXPIRED_KEY, GOOD_CERT, GOOD_KEY, MISMATCHED_KEY, tls_secret
from tests.unit.translate.gateway_strategies import OUR_CLASS_YAML

OPTS = TranslateOptions(address="198.18.0.10")

LB = """
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {type: LoadBalancer, ports: [{name: http, port: 8000}]}
"""


def slice_with(*addresses: str, name: str = "web-a") -> str:
    """A slice of Service shop/web with endpoints at ``addresses`` (no conditions: ready)."""
    raw = builders.endpoint_slice("web", name=name, namespace="shop", protocol="TCP",
                                  endpoints=[{"addresses": [a]} for a in addresses])
    return builders.manifest(raw)


def snapshot(*docs: str) -> Snapshot:
    loaded = load_text("\n---\n".join(docs))
    assert not loaded.errors, loaded.errors
    return Snapshot.of_objects(loaded.objects)


def test_quote_is_bounded_and_says_the_size() -> None:
    """Short text is quoted as is; a megabyte is cut to the limit with its size."""
    assert quote("a.example.com") == "'a.example.com'"
    long = "x" * 1_000_000
    shown = quote(long)
    assert len(shown) < 260
    assert "(1000000 bytes)" in shown


def test_a_huge_value_does_not_make_a_huge_message() -> None:
    """A 1 MB host in an Ingress gives a problem message of bounded size."""
    host = "h" * 1_000_000
    text = f"""
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: big, namespace: shop}}
spec:
  ingressClassName: podway
  rules: [{{host: "{host}_", http: {{paths: [{{path: /, pathType: Prefix,
          backend: {{service: {{name: web, port: {{number: 80}}}}}}}}]}}}}]
"""
    [problem] = [p for p in translate(snapshot(text), OPTS).problems
                 if p.reason is Reason.INVALID_HOST]
    assert len(problem.message) < 400


def test_address_problem_checks_the_family() -> None:
    """IPv4 slices hold IPv4 addresses; anything not an IP is refused."""
    assert address_problem("198.18.0.1", "IPv4") is None
    assert address_problem("2001:db8::1", "IPv6") is None
    assert address_problem("2001:db8::1", "IPv4") is not None
    assert address_problem("999.1.1.1") is not None
    assert address_problem("fe80::1%eth0") is not None


def test_a_bad_endpoint_address_leaves_only_itself_out() -> None:
    """One invalid address is a problem on its slice; the other endpoints are members."""
    result = translate(snapshot(LB, slice_with("198.18.1.1", "999.1.1.1")), OPTS)
    [pool] = result.ir.pools.values()
    assert [m.address for m in pool.members] == ["198.18.1.1"]
    [problem] = [p for p in result.problems if p.reason is Reason.INVALID_ADDRESS]
    assert str(problem.ref) == "EndpointSlice/shop/web-a"


def test_incremental_endpoint_change_reports_and_clears_address_problems() -> None:
    """An endpoint-only update brings the problem, and its fix takes it away, as a full run."""
    inc = IncrementalTranslator(OPTS)
    s0 = snapshot(LB, slice_with("198.18.1.1"))
    assert not inc.update(s0).problems
    [bad] = load_text(slice_with("198.18.1.1", "999.1.1.1")).objects
    s1 = s0.replace(EndpointSlice.KIND, {bad.key: bad})
    r1 = inc.update(s1, changed=[(EndpointSlice.KIND, bad.key)])
    assert r1 == translate(s1, OPTS)
    assert [p.reason for p in r1.problems] == [Reason.INVALID_ADDRESS]
    r2 = inc.update(s0, changed=[(EndpointSlice.KIND, bad.key)])
    assert not r2.problems


def test_mismatched_pair_is_refused_and_good_pair_served() -> None:
    """A key that does not belong to the certificate is an error; the right key is served."""
    snap = snapshot(tls_secret("bad", "shop", GOOD_CERT, MISMATCHED_KEY),
                    tls_secret("good", "shop"))
    bad = certificate_from_secret(snap, "shop", "bad", ("a.example.com",))
    assert bad.certificate is None
    assert bad.error is not None
    assert bad.error.reason is Reason.INVALID_SECRET
    assert "mismatched" in bad.error.message
    good = certificate_from_secret(snap, "shop", "good", ("a.example.com",))
    assert good.certificate is not None
    assert good.error is None
    assert good.warning is None


def test_certificate_validity_is_a_warning() -> None:
    """Expired or not-yet-valid certificates are served with CertificateNotCurrent."""
    snap = snapshot(tls_secret("old", "shop", EXPIRED_CERT, EXPIRED_KEY),
                    tls_secret("good", "shop"))
    old = certificate_from_secret(snap, "shop", "old", ())
    assert old.certificate is not None
    assert old.warning is not None
    assert old.warning.reason is Reason.CERTIFICATE_NOT_CURRENT
    early = certificate_from_secret(snap, "shop", "good", (),
                                    now=datetime(2019, 1, 1, tzinfo=UTC))
    assert early.warning is not None
    assert "not valid before" in early.warning.message


def test_an_unchanged_secret_is_parsed_once() -> None:
    """Translating the same Secret again hits the parse cache (cost O(change))."""
    snap = snapshot(tls_secret("good", "shop"))
    certificate_from_secret(snap, "shop", "good", ())
    misses = _check_pair.cache_info().misses
    for _ in range(3):
        certificate_from_secret(snap, "shop", "good", ())
    assert _check_pair.cache_info().misses == misses
    assert GOOD_KEY  # the fixture is a real key


def test_garbage_ca_bundle_fails_closed() -> None:
    """A CA bundle that does not parse makes the policy's backends fail closed (500)."""
    text = """
apiVersion: v1
kind: ConfigMap
metadata: {name: ca, namespace: shop}
data: {ca.crt: "-----BEGIN CERTIFICATE-----\\ngarbage\\n-----END CERTIFICATE-----\\n"}
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: p, namespace: shop}
spec:
  targetRefs: [{group: "", kind: Service, name: web}]
  validation: {caCertificateRefs: [{group: "", kind: ConfigMap, name: ca}], hostname: web.internal}
"""
    problems = translate(snapshot(text), OPTS).problems
    assert {p.reason for p in problems} >= {Reason.INVALID_CA_CERTIFICATE_REF,
                                            Reason.NO_VALID_CA_CERTIFICATE}


def test_manifest_addresses_bind_only_when_allowed() -> None:
    """A Service VIP binds when manifests may choose addresses; otherwise the configured one."""
    text = LB.replace("type: LoadBalancer,", "type: LoadBalancer, loadBalancerIP: 198.18.0.77,")
    snap = snapshot(text)
    refused = translate(snap, OPTS)
    assert [lst.address for lst in refused.ir.listeners] == ["198.18.0.10"]
    assert [p.reason for p in refused.problems] == [Reason.ADDRESS_NOT_ALLOWED]
    allowed = translate(snap, TranslateOptions(address="198.18.0.10", manifest_addresses=True))
    assert [lst.address for lst in allowed.ir.listeners] == ["198.18.0.77"]
    assert not allowed.problems


def test_not_owned_is_info_with_a_stable_reason() -> None:
    """Objects of other classes are listed as NotOwned at Severity.INFO (the status document's
    `owned: false` relies on exactly this pair)."""
    text = LB.replace("type: LoadBalancer,", "type: LoadBalancer, loadBalancerClass: other,")
    [problem] = translate(snapshot(text), OPTS).problems
    assert (problem.severity, problem.reason) == (Severity.INFO, Reason.NOT_OWNED)
    assert Reason.NOT_OWNED.value == "NotOwned"
    assert Severity.INFO.value == "info"
    assert not translate(snapshot(text), OPTS).has_errors


def ingress(name: str, namespace: str, path: str, ts: str) -> str:
    return builders.manifest(builders.ingress(
        name, namespace=namespace, host="h.example.com", path=path, class_name="podway",
        creationTimestamp=ts))


def test_same_namespace_shares_a_host_without_warning() -> None:
    """Two Ingresses of one namespace add paths to one host: no HostShared."""
    snap = snapshot(ingress("a", "shop", "/a", "2026-01-01T00:00:00Z"),
                    ingress("b", "shop", "/b", "2026-02-01T00:00:00Z"))
    assert not [p for p in translate(snap, OPTS).problems if p.reason is Reason.HOST_SHARED]


def test_strict_host_ownership_refuses_other_namespaces() -> None:
    """Strict mode: a younger Ingress of another namespace gets no route on the owned host."""
    snap = snapshot(ingress("a", "shop", "/a", "2026-01-01T00:00:00Z"),
                    ingress("b", "evil", "/login", "2026-02-01T00:00:00Z"))
    loose = translate(snap, OPTS)
    shared = {str(p.ref) for p in loose.problems if p.reason is Reason.HOST_SHARED}
    assert shared == {"Ingress/shop/a", "Ingress/evil/b"}
    strict = translate(snap, TranslateOptions(address="198.18.0.10", strict_host_ownership=True))
    [vhost] = strict.ir.listeners[0].virtual_hosts
    assert [str(r.origin) for r in vhost.routes] == ["Ingress/shop/a"]
    refused = [p for p in strict.problems if str(p.ref) == "Ingress/evil/b"]
    assert Reason.HOST_CONFLICT in {p.reason for p in refused}
    assert Reason.HOST_SHARED not in {p.reason for p in strict.problems}


ROUTE = OUR_CLASS_YAML + """---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: shop}
spec:
  gatewayClassName: podway
  listeners: [{name: http, port: 8080, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: shop}
spec:
  parentRefs: [{name: gw}]
  rules:
  - filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [%s]}}]
"""


def test_modifying_the_host_header_is_refused_as_a_problem() -> None:
    """The engine refuses route tables that modify Host; the rule gets a problem instead."""
    result = translate(snapshot(ROUTE % "{name: Host, value: evil.example.com}"), OPTS)
    [problem] = [p for p in result.problems if str(p.ref) == "HTTPRoute/shop/r"]
    assert problem.reason is Reason.UNSUPPORTED_VALUE
    assert "'host' cannot be modified" in problem.message


def test_header_names_and_values_the_engine_refuses_are_load_errors() -> None:
    """A header name with a space or a value with a newline never loads."""
    for header in ('{name: "X Bad", value: v}', '{name: X-Ok, value: "a\\nb"}'):
        loaded = load_text(ROUTE % header)
        assert loaded.errors, header


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(str),
                          st.text(max_size=20)), min_size=1, max_size=6))
def test_every_member_address_is_an_ip_of_the_slice_family(addresses: list[str]) -> None:
    """Whatever an IPv4 EndpointSlice holds, members are IPv4 addresses and each address left
    out is reported on the slice."""
    loaded = load_text(LB + "\n---\n" + slice_with(*addresses))
    if loaded.errors:  # text the YAML or the model refuses never reaches translation
        return
    result = translate(Snapshot.of_objects(loaded.objects), OPTS)
    members = [m.address for pool in result.ir.pools.values() for m in pool.members]
    assert all(address_problem(a, "IPv4") is None for a in members)
    bad = [a for a in addresses if address_problem(a, "IPv4") is not None]
    reported = [p for p in result.problems if p.reason is Reason.INVALID_ADDRESS]
    assert len(reported) == len(bad)


def test_lists_in_messages_are_bounded() -> None:
    """A TLS entry naming thousands of hosts is summarised, not copied, in its message."""
    hosts = ", ".join(f"h{i}.example.com" for i in range(3000))
    text = f"""
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: many, namespace: shop}}
spec:
  ingressClassName: podway
  tls: [{{hosts: [{hosts}], secretName: missing}}]
"""
    [problem] = [p for p in translate(snapshot(text), OPTS).problems
                 if p.reason is Reason.SECRET_NOT_FOUND]
    assert "and 2995 more" in problem.message
    assert len(problem.message) < 400
