"""MetalLB users point Podway at the same objects and get the same addresses: the pool
examples of MetalLB's own documentation, and Services written for MetalLB (its annotations),
allocate as MetalLB's allocator does — first free address in the order written, an IPv4 CIDR
from its network address on (MetalLB skips .0/.255 only with avoidBuggyIPs)."""

from __future__ import annotations

import yaml

from podway.model import ObjectRef, Snapshot
from podway.programs.ipam import Ipam, PoolKinds
from podway.translate import Reason, TranslateOptions
from tests import builders

# From MetalLB's configuration guide (website/content/configuration/_index.md and
# _advanced_ipaddresspool_configuration.md): no traffic is sent, only addresses computed.
DOCS = """
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: first-pool, namespace: metallb-system}
spec:
  addresses: [192.168.10.0/24, 192.168.9.1-192.168.9.5, "fc00:f853:0ccd:e799::/124"]
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: cheap, namespace: metallb-system}
spec: {addresses: [192.168.144.0/20], autoAssign: false}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: ippool-ns-service-alloc-sample, namespace: metallb-system}
spec:
  addresses: [192.168.20.0/24]
  avoidBuggyIPs: true
  serviceAllocation:
    priority: 50
    namespaces: [namespace-a, namespace-b]
    namespaceSelectors: [{matchLabels: {foo: bar}}]
    serviceSelectors: [{matchExpressions: [{key: app, operator: In, values: [bar]}]}]
"""


def service(name: str, ns: str = "default", n: int = 0, **kw: object) -> dict[str, object]:
    return builders.service(name, type_="LoadBalancer", namespace=ns, extra_meta={
        "uid": f"u-{name}", "creationTimestamp": f"2026-01-01T00:00:{n:02d}Z"},
        **kw)  # type: ignore[arg-type]


def grants(*services: dict[str, object]) -> dict[str, tuple[str, ...]]:
    objects = [builders.typed(o) for o in (*yaml.safe_load_all(DOCS), *services)]
    ipam = Ipam((), kinds=(PoolKinds.METALLB,))
    found = ipam.allocate(Snapshot.of_objects(objects), TranslateOptions())
    return {f"{ref.namespace}/{ref.name}": g.addresses or (str(g.reason),)
            for ref, g in found.items() if isinstance(ref, ObjectRef)}


def test_the_documented_pools_give_what_metallb_gives() -> None:
    """Plain Services draw from first-pool from 192.168.10.0 on (never from cheap, which is
    not auto-assigned); a bar app in namespace-a draws from the priority-50 pool, skipping
    192.168.20.0; a Service naming cheap by MetalLB's annotation gets its first address; one
    asking for an address by metallb.io/loadBalancerIPs gets it."""
    got = grants(
        service("one", n=1), service("two", n=2),
        service("tenant", "namespace-a", n=3, labels={"app": "bar"}),
        service("named", n=4, annotations={"metallb.io/address-pool": "cheap"}),
        service("asked", n=5, annotations={"metallb.io/loadBalancerIPs": "192.168.9.3"}),
        service("legacy", n=6, annotations={"metallb.universe.tf/address-pool": "cheap"}))
    assert got == {"default/one": ("192.168.10.0",), "default/two": ("192.168.10.1",),
                   "namespace-a/tenant": ("192.168.20.1",),
                   "default/named": ("192.168.144.0",), "default/asked": ("192.168.9.3",),
                   "default/legacy": ("192.168.144.1",)}


def test_metallb_sharing_and_a_pool_out_of_scope_behave_as_in_metallb() -> None:
    """Two Services with the same metallb.io/allow-shared-ip key and different ports share
    one address; naming the scoped pool from another namespace stays pending."""
    share = {"metallb.io/allow-shared-ip": "k", "metallb.io/loadBalancerIPs": "192.168.9.5"}
    got = grants(service("a", n=1, annotations=share, port=80),
                 service("b", n=2, annotations=share, port=443),
                 service("outside", "other", n=3, labels={"app": "bar"}, annotations={
                     "metallb.io/address-pool": "ippool-ns-service-alloc-sample"}))
    assert got["default/a"] == got["default/b"] == ("192.168.9.5",)
    assert got["other/outside"] == (str(Reason.ADDRESS_NOT_ALLOWED),)
