"""ListenerSets (GEP-1713) through a real engine in standalone mode: the listeners of the sets a
Gateway allows are served on its address, with the routes attached to each set; conflicts are
settled by listener precedence (the Gateway's own, then sets by age), and a set the Gateway does
not allow binds nothing. Loopback only, ephemeral ports, one stack per test."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from tests.waiting import eventually

from .gateway_helpers import CLASS, backend, gateway, request, route
from .harness import Stack, free_port

pytestmark = pytest.mark.e2e


def _set(name: str, namespace: str, parent: str, created: str, listeners: str) -> str:
    return f"""apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {{name: {name}, namespace: {namespace}, creationTimestamp: "{created}"}}
spec:
  parentRef: {{name: {parent}, namespace: default}}
  listeners:
{listeners}"""


def _conditions(entry: dict[str, object]) -> dict[str, tuple[str, str]]:
    conditions = entry["conditions"]
    assert isinstance(conditions, list)
    return {c["type"]: (c["status"], c["reason"]) for c in conditions}


async def _connect(port: int) -> None:
    async with asyncio.timeout(5):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()


async def _name(port: int, host: str) -> str:
    status, _, data = await request(port, host, "/")
    return f"{status} {data.get('name', '')}"


async def test_listener_sets_serve_their_listeners_and_routes(engine_stack: Stack) -> None:
    """Two sets join a Gateway that allows them: the older set's listener beside the Gateway's
    on one port and on a port of its own, the younger's on a third port. The set listener that
    repeats the Gateway's hostname, and the younger set's that repeats the older's, are
    Conflicted and serve nothing: those hosts stay with the higher-precedence listener's
    routes. A Gateway without allowedListeners binds nothing of its set."""
    stack = engine_stack
    for name, ns in (("www", "default"), ("app", "team-a"), ("bee", "team-b"),
                     ("stray", "team-a")):
        await backend(stack, name, namespace=ns)
    shared, own, third, refused = (free_port() for _ in range(4))
    gw = gateway(f"  - {{name: http, protocol: HTTP, port: {shared}, hostname: www.test}}\n")
    gw = gw.replace("  listeners:\n", "  allowedListeners: {namespaces: {from: All}}\n"
                    "  listeners:\n")
    closed = gateway(f"  - {{name: http, protocol: HTTP, port: {free_port()}}}\n",
                     name="closed")
    stack.write("gw.yaml", CLASS + "---\n" + gw + "---\n" + closed)
    stack.write("sets.yaml", "---\n".join((
        _set("team-a", "team-a", "gw", "2024-01-01T00:00:00Z",
             f"  - {{name: http, protocol: HTTP, port: {shared}, hostname: a.test}}\n"
             f"  - {{name: own, protocol: HTTP, port: {own}, hostname: a.test}}\n"
             f"  - {{name: dup, protocol: HTTP, port: {shared}, hostname: www.test}}\n"),
        _set("team-b", "team-b", "gw", "2024-02-01T00:00:00Z",
             f"  - {{name: http, protocol: HTTP, port: {shared}, hostname: a.test}}\n"
             f"  - {{name: third, protocol: HTTP, port: {third}, hostname: b.test}}\n"),
        _set("stray", "team-a", "closed", "2024-01-01T00:00:00Z",
             f"  - {{name: http, protocol: HTTP, port: {refused}}}\n"))))
    stack.write("routes.yaml", "---\n".join((
        route("www", """  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: www, port: 80}]}]
"""),
        route("app", """  parentRefs: [{kind: ListenerSet, name: team-a}]
  rules: [{backendRefs: [{name: app, port: 80}]}]
""", namespace="team-a"),
        route("bee", """  parentRefs: [{kind: ListenerSet, name: team-b}]
  rules: [{backendRefs: [{name: bee, port: 80}]}]
""", namespace="team-b"),
        route("stray", """  parentRefs: [{kind: ListenerSet, name: stray}]
  rules: [{backendRefs: [{name: stray, port: 80}]}]
""", namespace="team-a"))))
    await stack.start()

    assert await _name(shared, "www.test") == "200 default/www"  # the Gateway's listener wins
    assert await _name(shared, "a.test") == "200 team-a/app"  # the older set wins
    assert await _name(own, "a.test") == "200 team-a/app"
    assert await _name(third, "b.test") == "200 team-b/bee"
    with pytest.raises(ConnectionRefusedError):  # the set the Gateway does not allow: unbound
        await _connect(refused)

    objects = yaml.safe_load((stack.root.parent / "status.yaml").read_text())["objects"]
    gateway_status = objects["Gateway/default/gw"]["status"]
    assert gateway_status["attachedListenerSets"] == 2
    assert set(_conditions(gateway_status)) == {"Accepted", "Programmed"}  # no v1.4 leftover
    assert [ls["name"] for ls in gateway_status["listeners"]] == ["http"]
    team_a = objects["ListenerSet/team-a/team-a"]["status"]
    assert _conditions(team_a)["Accepted"] == ("True", "ListenersNotValid")
    listeners = {ls["name"]: ls for ls in team_a["listeners"]}
    assert _conditions(listeners["dup"])["Conflicted"] == ("True", "HostnameConflict")
    assert (listeners["http"]["attachedRoutes"], listeners["own"]["attachedRoutes"]) == (1, 1)
    team_b = {ls["name"]: ls for ls in objects["ListenerSet/team-b/team-b"]["status"]["listeners"]}
    assert _conditions(team_b["http"])["Conflicted"] == ("True", "HostnameConflict")
    assert _conditions(team_b["third"])["Programmed"] == ("True", "Programmed")
    stray = objects["ListenerSet/team-a/stray"]["status"]
    assert _conditions(stray)["Accepted"] == ("False", "NotAllowed")
    closed_status = objects["Gateway/default/closed"]["status"]
    assert closed_status["attachedListenerSets"] == 0
    assert set(_conditions(closed_status)) == {"Accepted", "Programmed"}
    route_parent = objects["HTTPRoute/team-a/app"]["status"]["parents"][0]
    assert route_parent["parentRef"]["kind"] == "ListenerSet"
    assert _conditions(route_parent)["Accepted"] == ("True", "Accepted")


async def test_a_set_listener_the_engine_cannot_bind_is_refused_on_the_set(
        engine_stack: Stack) -> None:
    """Real Envoy and HAProxy: a ListenerSet's listener moved onto a port another program
    holds. The engine refuses that listener (Envoy: a NACK; HAProxy: the reload fails, the last
    good configuration serves on); the status file puts the refusal on the set (the listener
    and the set Programmed=False/PortUnavailable, both still Accepted), while the Gateway,
    whose own listener keeps serving, stays Programmed and keeps counting the set. Moved to a
    free port, the set's listener serves and is Programmed again."""
    stack = engine_stack
    await backend(stack, "www")
    await backend(stack, "app", namespace="team-a")
    own, first, free = free_port(), free_port(), free_port()
    gw = gateway(f"  - {{name: http, protocol: HTTP, port: {own}, hostname: www.test}}\n")
    stack.write("gw.yaml", CLASS + "---\n" + gw.replace(
        "  listeners:\n", "  allowedListeners: {namespaces: {from: All}}\n  listeners:\n"))

    def team(port: int) -> str:
        return _set("team-a", "team-a", "gw", "2024-01-01T00:00:00Z",
                    f"  - {{name: extra, protocol: HTTP, port: {port}, hostname: a.test}}\n")

    stack.write("sets.yaml", team(first))
    stack.write("routes.yaml", route("www", """  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: www, port: 80}]}]
""") + "---\n" + route("app", """  parentRefs: [{kind: ListenerSet, name: team-a}]
  rules: [{backendRefs: [{name: app, port: 80}]}]
""", namespace="team-a"))
    await stack.start()
    assert await _name(first, "a.test") == "200 team-a/app"

    def objects() -> dict[str, dict[str, object]]:
        found = yaml.safe_load((stack.root.parent / "status.yaml").read_text())["objects"]
        assert isinstance(found, dict)
        return found

    def set_status() -> dict[str, object]:
        status = objects()["ListenerSet/team-a/team-a"]["status"]
        assert isinstance(status, dict)
        return status

    taken = free_port()
    holder = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", taken)
    try:
        stack.write("sets.yaml", team(taken))
        await eventually(lambda: _conditions(set_status())["Programmed"][0] == "False",
                         within=30)
        refused = set_status()
        listener = refused["listeners"][0]  # type: ignore[index]
        assert _conditions(listener)["Programmed"] == ("False", "PortUnavailable")
        assert _conditions(listener)["Accepted"] == ("True", "Accepted")
        assert _conditions(refused)["Programmed"] == ("False", "PortUnavailable")
        assert _conditions(refused)["Accepted"] == ("True", "Accepted")
        entry = objects()["ListenerSet/team-a/team-a"]
        assert "already in use" in str(entry["engine_rejections"]).lower()
        gateway_entry = objects()["Gateway/default/gw"]
        assert "engine_rejections" not in gateway_entry
        gateway_status = gateway_entry["status"]
        assert isinstance(gateway_status, dict)
        assert _conditions(gateway_status)["Programmed"] == ("True", "Programmed")
        assert _conditions(gateway_status["listeners"][0])["Programmed"] == (
            "True", "Programmed")
        assert gateway_status["attachedListenerSets"] == 1
        assert await _name(own, "www.test") == "200 default/www"
    finally:
        holder.close()
        await holder.wait_closed()
    stack.write("sets.yaml", team(free))
    await eventually(lambda: _conditions(set_status())["Programmed"] == ("True", "Programmed"),
                     within=30)
    async def served() -> bool:  # Envoy acknowledges a listener before it listens
        return await _name(free, "a.test") == "200 team-a/app"

    await eventually(served, within=20, ignoring=(ConnectionRefusedError,))
