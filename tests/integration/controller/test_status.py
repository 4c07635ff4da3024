"""Status written back through the status subresource: right content, once per change."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import yaml

from podway.engines.member_health import Message, Refusal
from podway.envoy.engine.listener_failures import describe
from tests.waiting import eventually

from .bed import (
    GW,
    Bed,
    cluster_service,
    edit,
    endpoint_slice,
    gateway,
    gateway_class,
    http_route,
    lb_service,
)


def seed_gateway(bed: Bed, routes: int = 3) -> None:
    bed.emu.install_gateway_api()
    bed.emu.put("gatewayclasses", gateway_class(), group=GW)
    bed.emu.put("gateways", gateway(), group=GW)
    bed.emu.put("services", cluster_service("web"))
    bed.emu.put("endpointslices", endpoint_slice("web", {"web-a": "198.18.5.1"}),
                group="discovery.k8s.io")
    for i in range(routes):
        bed.emu.put("httproutes", http_route(f"r{i}", f"r{i}.test"), group=GW)


def route_status(bed: Bed, name: str) -> dict[str, Any]:
    obj = bed.emu.get("httproutes", "default", name, group=GW)
    assert obj is not None
    return dict(obj.get("status") or {})


def status_patches(bed: Bed, plural: str, name: str | None = None) -> int:
    return sum(1 for p in bed.emu.patches
               if p.plural == plural and p.subresource == "status"
               and (name is None or p.name == name))


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    parent = status["parents"][0]
    return next(c for c in parent["conditions"] if c["type"] == type_)


async def test_gateway_api_status_is_written_once_per_change(bed: Bed) -> None:
    """Routes get Accepted/ResolvedRefs and the Gateway attachedRoutes, one PATCH each; an
    endpoint change writes nothing; a broken backend rewrites only that route, keeping the
    unchanged condition's lastTransitionTime."""
    seed_gateway(bed)
    await bed.start()
    await eventually(lambda: all(route_status(bed, f"r{i}") for i in range(3)))
    await eventually(lambda: bool(bed.emu.get("gateways", "default", "edge", group=GW)
                             .get("status")))  # type: ignore[union-attr]
    gw = bed.emu.get("gateways", "default", "edge", group=GW)
    assert gw is not None
    assert gw["status"]["listeners"][0]["attachedRoutes"] == 3
    first = route_status(bed, "r0")
    assert condition(first, "Accepted")["status"] == "True"
    assert condition(first, "ResolvedRefs")["status"] == "True"
    assert all(status_patches(bed, "httproutes", f"r{i}") == 1 for i in range(3))
    assert status_patches(bed, "gateways") == 1
    # The class carries the features Podway claims, sorted, as the status document has them
    # in standalone mode (one translator).
    await eventually(lambda: bool((bed.emu.get("gatewayclasses", "", "podway", group=GW) or {})
                                  .get("status", {}).get("supportedFeatures")))
    cls = bed.emu.get("gatewayclasses", "", "podway", group=GW)
    assert cls is not None
    names = [f["name"] for f in cls["status"]["supportedFeatures"]]
    assert names == sorted(names)
    assert {"Gateway", "HTTPRoute", "GatewayFrontendClientCertificateValidation"} <= set(names)
    accepted = next(c for c in cls["status"]["conditions"] if c["type"] == "Accepted")
    assert (accepted["status"], accepted["observedGeneration"]) == (
        "True", cls["metadata"].get("generation", 0))

    # Members move: statuses do not, so nothing is written.
    bed.emu.put("endpointslices", endpoint_slice("web", {"web-b": "198.18.5.2"}),
                group="discovery.k8s.io")
    await bed.until(lambda s: [m.address for m in s.ir.pools["pool/default/web/80"].members]
                    == ["198.18.5.2"])
    # A real change to one route: only that one is patched again.
    edit(bed, "httproutes", http_route("r1", "r1.test", backend="missing"), group=GW)
    await eventually(
        lambda: condition(route_status(bed, "r1"), "ResolvedRefs")["status"] == "False")
    after = route_status(bed, "r1")
    assert condition(after, "Accepted")["lastTransitionTime"] == \
        condition(first, "Accepted")["lastTransitionTime"]
    assert status_patches(bed, "httproutes", "r1") == 2
    assert status_patches(bed, "httproutes", "r0") == 1
    assert status_patches(bed, "httproutes", "r2") == 1


async def test_restart_writes_nothing_when_status_is_current(bed: Bed) -> None:
    """A restarted controller reads the statuses the API holds and PATCHes none of them, and
    says nothing new: no ``Synced`` Event is added or counted up for objects an earlier
    controller served (three API calls per object on every restart, for no news)."""
    seed_gateway(bed, routes=2)
    await bed.start()
    await eventually(lambda: status_patches(bed, "httproutes") == 2)
    await eventually(lambda: status_patches(bed, "gateways") == 1)
    await eventually(lambda: sum(e.get("reason") == "Synced" for e in bed.emu.events) == 3)
    await bed.stop_controller()
    before = [p for p in bed.emu.patches if p.subresource == "status"]
    events_before = [dict(e) for e in bed.emu.events]
    controller = await bed.start()
    await bed.until(lambda s: len(s.ir.listeners) == 1)
    assert controller.status is not None
    status = controller.status
    # The first document's events were chosen (without the three fronts found current:
    # checked below, no new Synced), and the writer keeps no such set from then on.
    await eventually(lambda: status.found_current is None)
    bed.emu.put("services", cluster_service("news"))  # a later state: events of the first
    await bed.until(lambda s: "Service" in s.update.snapshot.objects  # are recorded by then
                    and ("default", "news") in s.update.snapshot.objects["Service"])
    await asyncio.sleep(0.2)
    assert [p for p in bed.emu.patches if p.subresource == "status"] == before
    assert [dict(e) for e in bed.emu.events] == events_before


async def test_service_and_ingress_get_load_balancer_ingress(bed: Bed) -> None:
    """A LoadBalancer Service and an owned Ingress get status.loadBalancer.ingress: the
    --lb-address when the listener binds the wildcard."""
    bed.translate = bed.translate.__class__(address="0.0.0.0", http_port=18080)
    bed.emu.put("services", lb_service("lb", 9000))
    bed.emu.put("services", cluster_service("web"))
    bed.emu.put("ingresses", {
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "shop", "namespace": "default"},
        "spec": {"ingressClassName": "podway", "rules": [{"host": "shop.test", "http": {
            "paths": [{"path": "/", "pathType": "Prefix", "backend": {
                "service": {"name": "web", "port": {"number": 80}}}}]}}]}})
    await bed.start()

    def ingress_ip(plural: str, name: str) -> Any:
        obj = bed.emu.get(plural, "default", name)
        return ((obj or {}).get("status") or {}).get("loadBalancer", {}).get("ingress")

    await eventually(lambda: ingress_ip("services", "lb") == [{"ip": "198.18.0.100"}])
    await eventually(lambda: ingress_ip("ingresses", "shop") == [{"ip": "198.18.0.100"}])
    assert status_patches(bed, "services", "lb") == 1
    assert status_patches(bed, "services", "web") == 0  # not a LoadBalancer: not ours


async def test_failed_status_writes_are_retried_without_a_new_state(bed: Bed) -> None:
    """PATCHes the API refuses (500) are retried after a backoff, with no change in the
    cluster to trigger a new state; the status lands."""
    seed_gateway(bed, routes=2)
    bed.emu.fail(500, method="PATCH", plural="httproutes", times=2)
    await bed.start()
    state = await bed.until(lambda s: len(s.ir.listeners) == 1)
    await eventually(lambda: all(route_status(bed, f"r{i}") for i in range(2)))
    for name in ("r0", "r1"):  # refused once, then retried
        assert bed.emu.count("patch", "httproutes", "default", name, "status") == 2
    assert bed.pipeline.state is not None
    assert bed.pipeline.state.generation == state.generation  # nothing new came


TRAFFIC_POLICY_CRD = (Path(__file__).resolve().parents[3] / "deploy" / "helm" / "podway"
                      / "crds" / "trafficpolicies.podway.io.yaml")


def traffic_policy(name: str, target: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "podway.io/v1alpha1", "kind": "TrafficPolicy",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": target}], **spec}}


def policy_accepted(bed: Bed, name: str) -> dict[str, Any] | None:
    obj = bed.emu.get("trafficpolicies", "default", name, group="podway.io")
    ancestors = ((obj or {}).get("status") or {}).get("ancestors") or []
    if not ancestors:
        return None
    return next((c for c in ancestors[0]["conditions"] if c["type"] == "Accepted"), None)


async def test_traffic_policy_from_the_api_applies_and_gets_accepted_status(bed: Bed) -> None:
    """A TrafficPolicy (CRD as shipped in deploy/) reaches the translator: its timeout lands
    on the Service's pool and it gets Accepted=True in status.ancestors, written once; a bad
    value turns it Accepted=False (Invalid) naming the field; the CRD installed after start
    is picked up."""
    bed.emu.put("services", lb_service("web", 8081))
    bed.emu.put("endpointslices", endpoint_slice("web", {"web-a": "198.18.5.1"}),
                group="discovery.k8s.io")
    await bed.start()
    bed.emu.put("customresourcedefinitions", yaml.safe_load(TRAFFIC_POLICY_CRD.read_text()))
    bed.emu.put("trafficpolicies", traffic_policy("web", "web", timeouts={"connect": "3s"}),
                group="podway.io")
    state = await bed.until(lambda s: any(
        p.settings.connect_timeout_ms == 3000 for p in s.ir.pools.values()))
    assert state.ir.pools
    await eventually(lambda: policy_accepted(bed, "web") is not None)
    accepted = policy_accepted(bed, "web")
    assert accepted is not None
    assert (accepted["status"], accepted["reason"]) == ("True", "Accepted")
    assert status_patches(bed, "trafficpolicies", "web") == 1
    edit(bed, "trafficpolicies", traffic_policy("web", "web", timeouts={"connect": "soon"}),
         group="podway.io")
    await eventually(lambda: (policy_accepted(bed, "web") or {}).get("status") == "False")
    refused = policy_accepted(bed, "web")
    assert refused is not None
    assert refused["reason"] == "Invalid"
    assert "connect" in refused["message"]


async def test_a_foreign_status_write_is_repaired_at_once(bed: Bed) -> None:
    """Someone else patches a Service's status.loadBalancer to a wrong address: the watch
    event alone (no new state, no restart, long before the periodic sweep) makes the leader
    write the right one again; a field the API adds (ipMode) is not a change."""
    bed.translate = bed.translate.__class__(address="0.0.0.0", http_port=18080)
    bed.emu.put("services", lb_service("lb", 9000))
    await bed.start(status_resync_s=3600)

    def ingress_ip() -> Any:
        obj = bed.emu.get("services", "default", "lb")
        return ((obj or {}).get("status") or {}).get("loadBalancer", {}).get("ingress")

    await eventually(lambda: ingress_ip() == [{"ip": "198.18.0.100"}])
    generation = bed.pipeline.state.generation if bed.pipeline.state else -1
    obj = bed.emu.get("services", "default", "lb")
    assert obj is not None
    obj["status"] = {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}]}}
    bed.emu.put("services", obj)
    assert ingress_ip() == [{"ip": "203.0.113.9"}]
    await eventually(lambda: ingress_ip() == [{"ip": "198.18.0.100"}], within=5)
    assert status_patches(bed, "services", "lb") == 2
    assert bed.pipeline.state is not None
    assert bed.pipeline.state.generation == generation  # repaired without a new state

    # The API filling in a default is not someone else's write: nothing is patched.
    obj = bed.emu.get("services", "default", "lb")
    assert obj is not None
    assert obj["status"]["loadBalancer"]["ingress"] == [{"ip": "198.18.0.100"}]
    obj["status"]["loadBalancer"]["ingress"][0]["ipMode"] = "VIP"
    bed.emu.put("services", obj)
    await asyncio.sleep(1.5)
    assert status_patches(bed, "services", "lb") == 2


async def test_the_periodic_sweep_repairs_what_the_watch_missed(bed: Bed) -> None:
    """A status changed without a watch event the writer heard (here: the writer is told
    nothing) is found by the periodic comparison and written again."""
    bed.translate = bed.translate.__class__(address="0.0.0.0", http_port=18080)
    bed.emu.put("services", lb_service("lb", 9000))
    controller = await bed.start(status_resync_s=0.5)
    assert controller.source is not None

    def ingress_ip() -> Any:
        obj = bed.emu.get("services", "default", "lb")
        return ((obj or {}).get("status") or {}).get("loadBalancer", {}).get("ingress")

    await eventually(lambda: ingress_ip() == [{"ip": "198.18.0.100"}])
    controller.source.on_status = lambda kind, key, status: None  # the watch "misses" it
    obj = bed.emu.get("services", "default", "lb")
    assert obj is not None
    obj["status"] = {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}]}}
    bed.emu.put("services", obj)
    await eventually(lambda: ingress_ip() == [{"ip": "198.18.0.100"}], within=5)


async def test_a_service_whose_listener_the_engine_refuses_is_not_programmed(
        bed: Bed) -> None:
    """A LoadBalancer Service on a port another program holds: the engine refuses the
    listener, the Service gets podway.io/Programmed=False with Envoy's message and advertises
    no address; moved to a free port it is Programmed=True with its address."""
    from tests.e2e.harness import free_port

    taken, free = free_port(), free_port()
    holder = socket.socket()
    holder.bind(("127.0.0.1", taken))
    holder.listen()
    bed.translate = bed.translate.__class__(address="127.0.0.1")
    bed.emu.put("services", lb_service("lb", taken))
    try:
        await bed.start()
        await bed.engine()

        def status() -> dict[str, Any]:
            obj = bed.emu.get("services", "default", "lb")
            return dict((obj or {}).get("status") or {})

        def programmed() -> dict[str, Any]:
            return next((c for c in status().get("conditions") or []
                         if c["type"] == "podway.io/Programmed"), {})

        await eventually(lambda: programmed().get("status") == "False", within=20)
        assert programmed()["reason"] == "EngineRefused"
        assert "already in use" in programmed()["message"].lower()
        assert status()["loadBalancer"].get("ingress", []) == []
        edit(bed, "services", lb_service("lb", free))
        await eventually(lambda: programmed().get("status") == "True", within=20)
        assert status()["loadBalancer"]["ingress"] == [{"ip": "127.0.0.1"}]
    finally:
        holder.close()


async def test_an_ingress_asking_for_unserved_auth_is_refused_with_an_error_event(
        bed: Bed) -> None:
    """Controller mode: an nginx-class Ingress with auth-snippet (nginx configuration Podway
    cannot serve) gets a Warning event naming the key, and its route answers 403 instead of
    forwarding (fail closed)."""
    from podway.ir import DirectResponse
    from podway.ir.evaluate import Request, select_route

    bed.translate = bed.translate.__class__(address="127.0.0.1", http_port=18080,
                                            takeover_classes=("nginx",))
    bed.emu.put("services", cluster_service("web"))
    bed.emu.put("ingresses", {
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "shop", "namespace": "default", "annotations": {
            "nginx.ingress.kubernetes.io/auth-snippet": "proxy_set_header X-Tenant a;"}},
        "spec": {"ingressClassName": "nginx", "rules": [{"host": "shop.test", "http": {
            "paths": [{"path": "/", "pathType": "Prefix", "backend": {
                "service": {"name": "web", "port": {"number": 80}}}}]}}]}})
    await bed.start()

    def refused(state: Any) -> bool:
        listener = next((x for x in state.ir.listeners if x.name == "ingress/http"), None)
        route = listener and select_route(listener, Request(host="shop.test", path="/"))
        return bool(route) and route.action == DirectResponse(status=403)

    await bed.until(refused)
    await eventually(lambda: any(
        e.get("reason") == "UnsupportedAnnotation" and e.get("type") == "Warning"
        and "auth-snippet" in e.get("message", "") and "403" in e.get("message", "")
        for e in bed.emu.events))


async def test_a_listener_the_engine_accepted_but_could_not_listen_on_is_not_programmed(
        bed: Bed) -> None:
    """No NACK (two engines bound the port at once; issue 23.2): the engine's report of the
    failure gives the Service the same podway.io/Programmed=False a NACK gives."""
    from tests.e2e.harness import free_port

    port = free_port()
    bed.translate = bed.translate.__class__(address="127.0.0.1")
    bed.emu.put("services", lb_service("lb", port))
    controller = await bed.start()
    await bed.engine()

    def programmed() -> dict[str, Any]:
        obj = bed.emu.get("services", "default", "lb") or {}
        return next((c for c in (obj.get("status") or {}).get("conditions") or []
                     if c["type"] == "podway.io/Programmed"), {})

    await eventually(lambda: programmed().get("status") == "True", within=20)
    assert controller.pipeline is not None
    (listener,) = [ls.name for ls in controller.pipeline.state.ir.listeners]  # type: ignore[union-attr]
    # A second engine's report (the real engine-1 reports too: a report of its own node
    # would be replaced by its next one).
    controller.health_reports.apply(object(), Message(
        node="engine-2", full=True, hosts={},
        refused=(Refusal(listener, 1, describe("cannot listen() errno=98")),)))
    await eventually(lambda: programmed().get("status") == "False", within=20)
    assert programmed()["reason"] == "EngineRefused"
    assert "could not listen on its port" in programmed()["message"]
    assert "address already in use" in programmed()["message"]


async def test_listener_set_status_and_supported_version_reach_the_api(bed: Bed) -> None:
    """In controller mode the ListenerSet gets its status through the API (Accepted, its
    listeners with attachedRoutes), the Gateway attachedListenerSets, and the class
    SupportedVersion from the installed CRDs' bundle-version annotations."""
    seed_gateway(bed, routes=0)
    edge = gateway()
    edge["spec"]["allowedListeners"] = {"namespaces": {"from": "All"}}
    bed.emu.put("gateways", edge, group=GW)
    bed.emu.put("listenersets", {
        "apiVersion": f"{GW}/v1", "kind": "ListenerSet",
        "metadata": {"name": "team", "namespace": "default"},
        "spec": {"parentRef": {"name": "edge"}, "listeners": [
            {"name": "extra", "protocol": "HTTP", "port": 8081, "hostname": "team.test"}]}},
        group=GW)
    route = http_route("team", "team.test", parent="team")
    route["spec"]["parentRefs"][0]["kind"] = "ListenerSet"
    bed.emu.put("httproutes", route, group=GW)
    await bed.start()

    def status_of(plural: str, name: str, ns: str = "default") -> dict[str, Any]:
        return dict((bed.emu.get(plural, ns, name, group=GW) or {}).get("status") or {})

    await eventually(lambda: bool(status_of("listenersets", "team").get("listeners")))
    team = status_of("listenersets", "team")
    conditions = {c["type"]: (c["status"], c["reason"]) for c in team["conditions"]}
    assert conditions == {"Accepted": ("True", "Accepted"), "Programmed": ("True", "Programmed")}
    assert team["listeners"][0]["attachedRoutes"] == 1
    await eventually(lambda: status_of("gateways", "edge").get("attachedListenerSets") == 1)
    await eventually(lambda: any(c["type"] == "SupportedVersion" for c in status_of(
        "gatewayclasses", "podway", "").get("conditions", ())))
    version = next(c for c in status_of("gatewayclasses", "podway", "")["conditions"]
                   if c["type"] == "SupportedVersion")
    assert (version["status"], version["reason"]) == ("True", "SupportedVersion")


async def test_a_listener_set_listener_the_engine_cannot_bind_is_reported_on_the_set(
        bed: Bed) -> None:
    """A ListenerSet's listener on a port another program holds: the real Envoy refuses that
    listener (a NACK); the refusal lands on the set (its listener and its own Programmed:
    False/PortUnavailable, still Accepted) and not on the Gateway, whose own listener serves
    (Programmed=True, the set still counted). Moved to a free port, the set is Programmed."""
    from tests.e2e.harness import free_port

    taken, own, free = free_port(), free_port(), free_port()
    holder = socket.socket()
    holder.bind(("127.0.0.1", taken))
    holder.listen()
    bed.translate = bed.translate.__class__(address="127.0.0.1")
    seed_gateway(bed, routes=0)
    edge = gateway(port=own)
    edge["spec"]["allowedListeners"] = {"namespaces": {"from": "All"}}
    bed.emu.put("gateways", edge, group=GW)

    def team(port: int) -> dict[str, Any]:
        return {"apiVersion": f"{GW}/v1", "kind": "ListenerSet",
                "metadata": {"name": "team", "namespace": "default"},
                "spec": {"parentRef": {"name": "edge"}, "listeners": [
                    {"name": "extra", "protocol": "HTTP", "port": port,
                     "hostname": "team.test"}]}}

    def status_of(plural: str, name: str) -> dict[str, Any]:
        return dict((bed.emu.get(plural, "default", name, group=GW) or {}).get("status") or {})

    def conditions(of: dict[str, Any]) -> dict[str, tuple[str, str]]:
        return {c["type"]: (c["status"], c["reason"]) for c in of.get("conditions") or ()}

    def listener(of: dict[str, Any]) -> dict[str, tuple[str, str]]:
        return conditions((of.get("listeners") or [{}])[0])

    bed.emu.put("listenersets", team(taken), group=GW)
    try:
        await bed.start()
        await bed.engine()
        await eventually(lambda: listener(status_of("listenersets", "team")).get(
            "Programmed", ("",))[0] == "False", within=30)
        found = status_of("listenersets", "team")
        assert listener(found)["Programmed"] == ("False", "PortUnavailable")
        assert listener(found)["Accepted"] == ("True", "Accepted")
        message = next(c["message"] for c in found["listeners"][0]["conditions"]
                       if c["type"] == "Programmed")
        assert "already in use" in message.lower()
        assert conditions(found)["Programmed"] == ("False", "PortUnavailable")
        assert conditions(found)["Accepted"] == ("True", "Accepted")
        # Events go out after the statuses of the same state (and the Gateway's status may
        # be written by another PATCH of that pass): wait for them, then look.
        await eventually(lambda: any(
            e.get("reason") == "EngineRejected"
            and e.get("involvedObject", {}).get("kind") == "ListenerSet"
            for e in bed.emu.events), within=30)
        await eventually(lambda: status_of("gateways", "edge").get("attachedListenerSets") == 1,
                         within=30)
        edge_status = status_of("gateways", "edge")
        assert conditions(edge_status)["Programmed"] == ("True", "Programmed")
        assert conditions(edge_status)["Accepted"] == ("True", "Accepted")
        assert listener(edge_status)["Programmed"] == ("True", "Programmed")
        assert not any(e.get("reason") == "EngineRejected"
                       and e.get("involvedObject", {}).get("kind") == "Gateway"
                       for e in bed.emu.events)
        edit(bed, "listenersets", team(free), group=GW)
        await eventually(lambda: conditions(status_of("listenersets", "team")).get(
            "Programmed") == ("True", "Programmed"), within=30)
        assert listener(status_of("listenersets", "team"))["Programmed"] == (
            "True", "Programmed")
    finally:
        holder.close()


async def test_the_api_status_is_the_status_documents_as_standalone_writes_it(bed: Bed) -> None:
    """One translator, one document: the Gateway API statuses the controller writes through
    the API (ListenerSets, Gateways, routes of the gateway-listenersets golden case) are
    exactly what the status document — standalone's --status-file — says of the same objects,
    condition for condition (lastTransitionTime aside, which only the writer stamps)."""
    from podway.model import Snapshot
    from podway.model.kinds import BY_NAME
    from podway.model.loader import load_text
    from podway.status import build
    from podway.translate import TranslateOptions, translate
    from podway.translate.core.status import to_api

    case = (Path(__file__).parents[2] / "golden/translate/gateway-listenersets.in.yaml")
    bed.emu.install_gateway_api()
    docs = [d for d in yaml.safe_load_all(case.read_text()) if d]
    for doc in docs:
        kind = BY_NAME[doc["kind"]]
        bed.emu.put(kind.plural, doc, group=kind.group or None)
    bed.translate = TranslateOptions(address="198.18.0.10")
    await bed.start()
    compared = ("Gateway", "ListenerSet", "HTTPRoute")

    def api_statuses() -> dict[str, Any]:
        out = {}
        for doc in docs:
            if doc["kind"] in compared:
                kind, meta = BY_NAME[doc["kind"]], doc["metadata"]
                obj = bed.emu.get(kind.plural, meta.get("namespace", ""), meta["name"],
                                  group=kind.group) or {}
                out[f"{doc['kind']}/{meta.get('namespace', '')}/{meta['name']}"] = \
                    _untimed(obj.get("status") or {})
        return out

    await eventually(lambda: all(api_statuses().values()), within=30)
    stored = [bed.emu.get(BY_NAME[d["kind"]].plural, d["metadata"].get("namespace", ""),
                          d["metadata"]["name"], group=BY_NAME[d["kind"]].group or None)
              for d in docs]
    snapshot = Snapshot.of_objects(load_text(yaml.safe_dump_all(stored)).objects)
    document = build(snapshot=snapshot, result=translate(snapshot, bed.translate))
    want = {str(ref): to_api(status, kind=ref.kind) for ref, status in document.statuses.items()
            if ref.kind in compared}
    await eventually(lambda: api_statuses() == want, within=30)
    assert len(want) == 11  # 2 Gateways, 4 ListenerSets, 5 HTTPRoutes


def _untimed(status: Any) -> Any:
    if isinstance(status, dict):
        return {k: _untimed(v) for k, v in status.items() if k != "lastTransitionTime"}
    if isinstance(status, list):
        return [_untimed(v) for v in status]
    return status


async def test_the_controllers_own_status_writes_come_back_unparsed(bed: Bed) -> None:
    """The writer tells the source each write's resourceVersion: the watch events of those
    writes are dropped before they are parsed (one that overtakes its PATCH's answer is
    parsed as before), and the routes' statuses are still what the API holds."""
    seed_gateway(bed, routes=20)
    controller = await bed.start()
    await eventually(lambda: all(route_status(bed, f"r{i}") for i in range(20)))
    source = controller.source
    assert source is not None
    await eventually(lambda: source.echoes > 0)
    assert source.echoes <= status_patches(bed, "httproutes") + 2  # routes, Gateway, class
    await eventually(lambda: all(
        source.current_status("HTTPRoute", ("default", f"r{i}")) == route_status(bed, f"r{i}")
        for i in range(20)))


async def test_a_pass_has_at_most_status_concurrency_patches_in_flight(
        bed: Bed, monkeypatch: Any) -> None:
    """Twelve statuses due, three in flight at most (``status_concurrency``), all written, one
    PATCH each."""
    from podway.programs.controller import status as status_module

    seed_gateway(bed, routes=10)
    in_flight, most = 0, 0
    real = status_module.patch_status

    async def counting(*args: Any, **kw: Any) -> Any:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            await asyncio.sleep(0.01)  # long enough for every worker to start one
            return await real(*args, **kw)
        finally:
            in_flight -= 1

    monkeypatch.setattr(status_module, "patch_status", counting)
    await bed.start(status_concurrency=3)
    await eventually(lambda: all(route_status(bed, f"r{i}") for i in range(10)))
    await eventually(lambda: status_patches(bed, "gateways") == 1)
    assert most == 3
    assert all(status_patches(bed, "httproutes", f"r{i}") == 1 for i in range(10))
