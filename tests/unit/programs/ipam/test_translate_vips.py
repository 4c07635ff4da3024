"""The translator with an allocator: objects bind exactly what the IPAM grants, pending ones
bind nothing and say why, and ownership follows the translator's own rules."""

from __future__ import annotations

from podway.model import ObjectRef, Snapshot
from podway.model.loader import load_text
from podway.programs.ipam import Ipam, parse_pools
from podway.translate import Reason, TranslateOptions, translate
from tests.unit.translate.gateway_strategies import OUR_CLASS_YAML

POOLS = parse_pools({"pools": [{"name": "p", "addresses": ["198.18.5.1-198.18.5.2"]}]})
OPTS = TranslateOptions(address="0.0.0.0", vips=Ipam(POOLS))


def svc(name: str, ts: str, extra: str = "", status: str = "") -> str:
    return f"""
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: shop, uid: u-{name}, creationTimestamp: "{ts}"{extra}}}
spec: {{type: LoadBalancer, ports: [{{port: 80}}]}}
{status}
"""


GATEWAY = OUR_CLASS_YAML + """---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: shop, uid: u-gw, creationTimestamp: "2026-01-01T00:00:09Z"}
spec:
  gatewayClassName: podway
  listeners: [{name: http, port: 8080, protocol: HTTP}]
"""


def snapshot(*docs: str) -> Snapshot:
    loaded = load_text("\n---\n".join(docs))
    assert not loaded.errors, loaded.errors
    return Snapshot.of_objects(loaded.objects)


def test_services_bind_their_grants_and_the_last_one_is_pending() -> None:
    """Two addresses, three Services: the oldest two bind them, the third binds nothing and
    carries PoolExhausted; no listener binds the wildcard."""
    result = translate(snapshot(svc("a", "2026-01-01T00:00:01Z"),
                                svc("b", "2026-01-01T00:00:02Z"),
                                svc("c", "2026-01-01T00:00:03Z")), OPTS)
    bound = {ls.name: ls.address for ls in result.ir.listeners}
    assert bound == {"service/shop/a/80/tcp": "198.18.5.1", "service/shop/b/80/tcp": "198.18.5.2"}
    (problem,) = result.problems_by_object()[ObjectRef("Service", "shop", "c")]
    assert problem.reason is Reason.POOL_EXHAUSTED


def test_status_address_is_kept_and_other_class_is_ignored() -> None:
    """A Service's status address is its own after a restart; a Service of another
    loadBalancerClass takes no address."""
    held = "status: {loadBalancer: {ingress: [{ip: 198.18.5.2}]}}"
    foreign = svc("foreign", "2026-01-01T00:00:00Z").replace(
        "type: LoadBalancer,", "type: LoadBalancer, loadBalancerClass: x.io/lb,")
    result = translate(snapshot(svc("old", "2026-01-01T00:00:01Z"),
                                svc("young", "2026-01-01T00:00:05Z", status=held),
                                foreign), OPTS)
    bound = {ls.name: ls.address for ls in result.ir.listeners}
    assert bound == {"service/shop/old/80/tcp": "198.18.5.1",
                     "service/shop/young/80/tcp": "198.18.5.2"}


def test_every_requested_address_gets_a_listener() -> None:
    """A Service asking for two addresses (annotation podway.io/vip) listens on both."""
    two = ', annotations: {podway.io/vip: "198.18.5.1, 198.18.5.2"}'
    result = translate(snapshot(svc("a", "2026-01-01T00:00:01Z", extra=two)), OPTS)
    assert sorted(ls.address for ls in result.ir.listeners) == ["198.18.5.1", "198.18.5.2"]
    assert len({ls.name for ls in result.ir.listeners}) == 2


def test_gateway_gets_an_address_or_is_not_programmed() -> None:
    """A Gateway without spec.addresses is allocated one; when the pool is empty it is
    Programmed=False with AddressNotAssigned and binds nothing."""
    result = translate(snapshot(GATEWAY), OPTS)
    assert {ls.address for ls in result.ir.listeners} == {"198.18.5.1"}
    status = result.statuses[ObjectRef("Gateway", "shop", "gw")]
    assert status.addresses == (("IPAddress", "198.18.5.1"),)
    fresh = TranslateOptions(address="0.0.0.0", vips=Ipam(POOLS))  # a new process
    full = translate(snapshot(GATEWAY, svc("a", "2026-01-01T00:00:01Z"),
                              svc("b", "2026-01-01T00:00:02Z")), fresh)
    assert not [ls for ls in full.ir.listeners if ls.name.startswith("gateway")]
    gw = full.statuses[ObjectRef("Gateway", "shop", "gw")]
    programmed = next(c for c in gw.conditions if c.type == "Programmed")
    assert programmed.status is False
    assert programmed.reason == Reason.ADDRESS_NOT_ASSIGNED
    accepted = next(c for c in gw.conditions if c.type == "Accepted")  # valid, only waiting
    assert (accepted.status, accepted.reason) == (True, Reason.ACCEPTED)


def test_a_grant_whose_status_is_not_written_yet_is_kept() -> None:
    """The same allocator keeps its earlier answer for an object whose status does not show it
    yet: an older object appearing later takes the next address, not this one."""
    opts = TranslateOptions(address="0.0.0.0", vips=Ipam(POOLS))
    first = translate(snapshot(svc("young", "2026-01-01T00:00:05Z")), opts)
    assert [ls.address for ls in first.ir.listeners] == ["198.18.5.1"]
    later = translate(snapshot(svc("young", "2026-01-01T00:00:05Z"),
                               svc("old", "2026-01-01T00:00:01Z")), opts)
    bound = {ls.name: ls.address for ls in later.ir.listeners}
    assert bound == {"service/shop/young/80/tcp": "198.18.5.1",
                     "service/shop/old/80/tcp": "198.18.5.2"}


def test_gateway_binds_every_granted_address() -> None:
    """A Gateway asking for two pool addresses gets both, listens on both and lists both."""
    two = GATEWAY.replace("  gatewayClassName: podway\n", "  gatewayClassName: podway\n"
                          "  addresses: [{type: IPAddress, value: 198.18.5.2},"
                          " {type: IPAddress, value: 198.18.5.1}]\n")
    result = translate(snapshot(two), TranslateOptions(address="0.0.0.0", vips=Ipam(POOLS)))
    assert sorted(ls.address for ls in result.ir.listeners) == ["198.18.5.1", "198.18.5.2"]
    status = result.statuses[ObjectRef("Gateway", "shop", "gw")]
    assert status.addresses == (("IPAddress", "198.18.5.2"), ("IPAddress", "198.18.5.1"))


def test_held_in_status_reads_services_and_gateways_and_ignores_foreign_shapes() -> None:
    """What a raw API status shows as held: Service ingress IPs, Gateway IPAddress values;
    hostnames, other types and hand-edited shapes count as nothing; no status is None."""
    from podway.programs.ipam import held_in_status

    assert held_in_status("Service", None) is None
    assert held_in_status("Service", {"loadBalancer": {"ingress": [
        {"ip": "198.18.5.1"}, {"hostname": "lb.example"}, {"ip": "198.18.5.2"}]}}) == (
        "198.18.5.1", "198.18.5.2")
    assert held_in_status("Service", {"loadBalancer": "oops"}) == ()
    assert held_in_status("Gateway", {"addresses": [
        {"type": "IPAddress", "value": "198.18.5.1"}, {"type": "Hostname", "value": "x"},
        {"value": "198.18.5.3"}, "junk"]}) == ("198.18.5.1", "198.18.5.3")


def test_dual_stack_service_listens_on_both_families() -> None:
    """spec.ipFamilyPolicy RequireDualStack: the Service binds an IPv4 and an IPv6 VIP."""
    pools = parse_pools({"pools": [{"name": "d", "addresses": ["198.18.5.1", "2001:db8::5"]}]})
    dual = svc("a", "2026-01-01T00:00:01Z").replace(
        "type: LoadBalancer,", "type: LoadBalancer, ipFamilyPolicy: RequireDualStack, "
        "ipFamilies: [IPv6, IPv4],")
    result = translate(snapshot(dual), TranslateOptions(address="0.0.0.0", vips=Ipam(pools)))
    assert [ls.address for ls in result.ir.listeners] == ["2001:db8::5", "198.18.5.1"]


INGRESS = """
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: shop, uid: u-web, creationTimestamp: "2026-01-01T00:00:05Z"}
spec:
  ingressClassName: podway
  defaultBackend: {service: {name: web, port: {number: 80}}}
"""


def test_ingress_listeners_get_a_vip_or_bind_nothing() -> None:
    """With an allocator the shared Ingress listeners bind the VIP it grants them (one for
    every Ingress, by age like any claim), which status.loadBalancer then publishes; with the
    pool exhausted they bind nothing and each Ingress says why."""
    result = translate(snapshot(INGRESS, svc("a", "2026-01-01T00:00:09Z")), OPTS)
    bound = {ls.name: ls.address for ls in result.ir.listeners}
    assert bound == {"ingress/http": "198.18.5.1", "service/shop/a/80/tcp": "198.18.5.2"}
    fresh = TranslateOptions(address="0.0.0.0", vips=Ipam(POOLS))
    full = translate(snapshot(INGRESS, svc("a", "2026-01-01T00:00:01Z"),
                              svc("b", "2026-01-01T00:00:02Z")), fresh)
    assert not [ls for ls in full.ir.listeners if ls.name.startswith("ingress")]
    problems = full.problems_by_object()[ObjectRef("Ingress", "shop", "web")]
    assert Reason.POOL_EXHAUSTED in [p.reason for p in problems]  # (and the missing Service)
