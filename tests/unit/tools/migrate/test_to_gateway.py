"""to-gateway on any parsed Ingress: never raises, and what it writes always loads as Gateway API
objects Podway reads (Hypothesis over paths, hosts and annotation values)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podway.model import Ingress
from podway.model.loader import load_text, parse_object
from podway.tools.migrate.probes import from_objects
from podway.tools.migrate.to_gateway import convert, dump

KEYS = ("rewrite-target", "use-regex", "ssl-redirect", "force-ssl-redirect",
        "permanent-redirect", "temporal-redirect", "temporal-redirect-code", "app-root",
        "upstream-vhost", "x-forwarded-prefix", "enable-cors", "cors-allow-origin", "canary",
        "canary-by-header", "canary-by-header-value", "canary-by-cookie", "canary-weight",
        "configuration-snippet", "proxy-read-timeout", "limit-rps")
VALUES = st.sampled_from(["true", "false", "/", "/$2", "/x/$1", "10", "https://a.test/b",
                          "X-Canary", "gold", "", "??", "http://[bad", "/app",
                          "\u00b2"])  # a digit int() refuses
PATHS = st.sampled_from(["/", "/api", "/api/", "/api(/|$)(.*)", "/(a|b)/(.*)", "/x/[0-9]+",
                         "/v1", "/api/status"])
HOSTS = st.sampled_from([None, "a.test", "*.b.test", "c.test"])


@st.composite
def ingresses(draw: st.DrawFn) -> Ingress:
    notes = draw(st.dictionaries(st.sampled_from(KEYS).map(
        lambda k: "nginx.ingress.kubernetes.io/" + k), VALUES, max_size=5))
    rules = [{"host": h, "http": {"paths": [
        {"path": p, "pathType": draw(st.sampled_from(["Prefix", "Exact",
                                                      "ImplementationSpecific"])),
         "backend": {"service": {"name": "web", "port": draw(st.sampled_from(
             [{"number": 80}, {"name": "http"}]))}}} for p in draw(st.lists(PATHS, min_size=1,
                                                                           max_size=3))]}}
             for h in draw(st.lists(HOSTS, min_size=1, max_size=2))]
    spec: dict[str, object] = {"rules": [{k: v for k, v in r.items() if v is not None}
                                         for r in rules]}
    if draw(st.booleans()):
        spec["tls"] = [{"hosts": [h for h in (r["host"] for r in rules) if h],
                        "secretName": "cert"}]
    if draw(st.booleans()):
        spec["defaultBackend"] = {"service": {"name": "web", "port": {"number": 80}}}
    raw = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
           "metadata": {"name": draw(st.sampled_from(["a", "b", "c"])),
                        "namespace": draw(st.sampled_from(["x", "y"])), "annotations": notes},
           "spec": spec}
    obj, error = parse_object(raw)
    assert error is None
    assert isinstance(obj, Ingress)
    return obj


@settings(max_examples=60, deadline=None)
@given(st.lists(ingresses(), min_size=1, max_size=4))
def test_convert_never_raises_and_its_output_loads(objects: list[Ingress]) -> None:
    """Also: compare's request generation never raises on the same Ingresses."""
    assert all(p.path.startswith("/") for p in from_objects(objects))
    result = convert(objects)
    loaded = load_text(dump(result.objects))
    assert loaded.errors == []
    assert {o.KIND for o in loaded.objects} <= {"GatewayClass", "Gateway", "ReferenceGrant",
                                                "HTTPRoute"}
    assert sum(o.KIND == "Gateway" for o in loaded.objects) == 1


def test_a_family_to_gateway_does_not_know_is_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader may learn a family before to-gateway converts it: that is a note, never a
    silent drop (as ssl-passthrough once was)."""
    from podway.tools.migrate import not_carried

    obj, _ = parse_object({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "a", "namespace": "x",
                     "annotations": {"nginx.ingress.kubernetes.io/app-root": "/app"}},
        "spec": {"rules": [{"host": "a.test", "http": {"paths": [{
            "path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})
    assert isinstance(obj, Ingress)
    assert convert([obj]).notes == ()
    monkeypatch.setattr(not_carried, "CARRIED", not_carried.CARRIED - {"app_root"})
    (note,) = convert([obj]).notes
    assert note.key == "nginx.ingress.kubernetes.io/(app-root)"
    assert "not carried over" in note.message
