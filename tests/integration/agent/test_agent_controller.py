"""The agent against a wire-level API emulator: kubernetes-asyncio's real list/watch/patch run."""

from __future__ import annotations

import errno
import json
from collections.abc import Callable, Iterable
from typing import Any

import aiohttp
from fakes import FakeOpener, FakeRules, SlowRules
from harness import StartAgent
from tests.waiting import eventually

from builders import NODE, node_obj, pod_obj, service_obj, settled
from podway.kube.emulator import KubeEmulator
from podway.programs.agent.types import Rule
from podway.readers.metrics.exposition import make_app, serve

ANN = "nodeportlocal.antrea.io"


def ann(emu: KubeEmulator, name: str, ns: str = "default") -> list[dict[str, Any]] | None:
    value = emu.annotation(ns, name, ANN)
    return None if value is None else list(json.loads(value))


def set_status(emu: KubeEmulator, name: str, **status: Any) -> None:
    """Change a pod's status the way the kubelet would: the rest of the object is kept."""
    current = emu.get("pods", "default", name)
    assert current is not None
    emu.put("pods", {**current, "status": {**current["status"], **status}})


def rule(port: int, ip: str = "198.18.1.2", pod_port: int = 8080) -> Rule:
    return Rule(protocol="tcp", node_port=port, pod_ip=ip, pod_port=pod_port)


async def test_selected_pod_gets_port_rule_and_annotation(emu: KubeEmulator,
                                                          start_agent: StartAgent) -> None:
    """An opted-in Service's local pod gets a node port, a DNAT rule and Antrea's annotation."""
    emu.put("nodes", node_obj(external="198.19.0.1"))
    emu.put("services", service_obj())
    emu.put("pods", pod_obj("p1"))
    emu.put("pods", pod_obj("elsewhere", ip="198.18.7.7", node="node-b"))
    rules = FakeRules()
    await start_agent(rules=rules)
    await eventually(lambda: ann(emu, "p1"))
    # nodeIP is the InternalIP, as Antrea writes it (pod.status.hostIP), not the ExternalIP.
    assert ann(emu, "p1") == [{"podPort": 8080, "nodeIP": "198.18.0.1", "nodePort": 61000,
                               "protocol": "tcp", "ipFamily": "IPv4"}]
    assert rules.rules == {rule(61000)}
    assert ann(emu, "elsewhere", "default") is None
    assert {p.content_type for p in emu.patches} == {"application/merge-patch+json"}
    assert any("fieldSelector=spec.nodeName%3Dnode-a" in r for r in emu.requests)


async def test_services_share_mappings_and_disable_cleans_up(emu: KubeEmulator,
                                                             start_agent: StartAgent) -> None:
    """Services on one targetPort share a mapping; disabling them removes rule and annotation."""
    emu.put("nodes", node_obj())
    emu.put("services", service_obj("a"))
    emu.put("services", service_obj("b"))
    emu.put("services", service_obj("udp", ports=[{"port": 53, "targetPort": 5353,
                                                   "protocol": "UDP"}]))
    emu.put("pods", pod_obj("p1"))
    rules = FakeRules()
    await start_agent(rules=rules)
    await eventually(lambda: len(ann(emu, "p1") or []) == 2)
    assert rules.rules == {rule(61000),
                           Rule(protocol="udp", node_port=61000, pod_ip="198.18.1.2",
                                pod_port=5353)}
    for name in ("a", "b", "udp"):
        emu.put("services", service_obj(name, enabled="false"))
    await eventually(lambda: ann(emu, "p1") is None)
    await eventually(lambda: rules.rules == set())
    assert emu.patches[-1].body == {"metadata": {"annotations": {ANN: None}}}


async def test_ip_change_keeps_port_and_deletion_releases(emu: KubeEmulator,
                                                          start_agent: StartAgent) -> None:
    """A new pod IP keeps the node port; pod deletion removes only that pod's rule."""
    emu.put("nodes", node_obj())
    emu.put("services", service_obj())
    emu.put("pods", pod_obj("p1"))
    opener = FakeOpener()
    rules = FakeRules()
    agent = await start_agent(rules=rules, opener=opener)
    await eventually(lambda: rules.rules == {rule(61000)})
    set_status(emu, "p1", podIP="198.18.1.9", podIPs=[{"ip": "198.18.1.9"}])
    await eventually(lambda: rules.rules == {rule(61000, "198.18.1.9")})
    await eventually(lambda: ann(emu, "p1") and ann(emu, "p1")[0]["nodePort"] == 61000)  # type: ignore[index]
    # Recycled IP: p2 takes p1's old address; deleting p1 must not touch p2's rule.
    emu.put("pods", pod_obj("p2", ip="198.18.1.9"))
    await eventually(lambda: len(rules.rules) == 2)
    emu.delete("pods", "default", "p1")
    await eventually(lambda: rules.rules == {rule(61001, "198.18.1.9")})
    assert opener.held == {("tcp", 61001)}
    assert len(agent.table) == 1


async def test_pod_without_ip_then_ip_and_terminal_phase(emu: KubeEmulator,
                                                         start_agent: StartAgent) -> None:
    """No IP: nothing yet; IP arrives: mapped; Succeeded: released and annotation removed."""
    emu.put("nodes", node_obj())
    emu.put("services", service_obj())
    emu.put("pods", pod_obj("p1", ip=None, phase="Pending"))
    rules = FakeRules()
    agent = await start_agent(rules=rules)
    await settled(agent)  # the pod's reconcile (rules and annotation) is over
    assert agent.queue.failures("default/p1") == 0
    assert rules.rules == set()
    assert ann(emu, "p1") is None
    set_status(emu, "p1", phase="Running", podIP="198.18.1.2")
    await eventually(lambda: ann(emu, "p1"))
    assert rules.rules == {rule(61000)}
    set_status(emu, "p1", phase="Succeeded")
    await eventually(lambda: ann(emu, "p1") is None)
    await eventually(lambda: rules.rules == set())


async def test_invalid_annotation_replaced_and_node_ip_change(emu: KubeEmulator,
                                                              start_agent: StartAgent) -> None:
    """An invalid annotation is replaced; a Node address change rewrites nodeIP everywhere."""
    emu.put("nodes", node_obj())
    emu.put("services", service_obj())
    emu.put("pods", pod_obj("p1", annotations={ANN: "not json"}))
    await start_agent()
    await eventually(lambda: (ann_text := emu.annotation("default", "p1", ANN)) is not None
                     and ann_text.startswith("["))
    assert ann(emu, "p1")[0]["nodeIP"] == "198.18.0.1"  # type: ignore[index]
    emu.put("nodes", node_obj(internal="198.18.5.5", external="198.19.5.5"))
    await eventually(lambda: ann(emu, "p1")[0]["nodeIP"] == "198.18.5.5")  # type: ignore[index]


async def test_named_port_host_port_and_selector_change(emu: KubeEmulator,
                                                        start_agent: StartAgent) -> None:
    """Named targetPorts resolve; hostPort is reported without a rule; selector changes apply."""
    emu.put("nodes", node_obj())
    emu.put("services", service_obj(ports=[{"port": 80, "targetPort": "http"},
                                           {"port": 81, "targetPort": 9090}]))
    emu.put("pods", pod_obj("p1", ports=[{"name": "http", "containerPort": 8080},
                                         {"containerPort": 9090, "hostPort": 30090}]))
    rules = FakeRules()
    await start_agent(rules=rules)
    await eventually(lambda: len(ann(emu, "p1") or []) == 2)
    assert sorted((e["podPort"], e["nodePort"]) for e in ann(emu, "p1") or []) == [
        (8080, 61000), (9090, 30090)]
    assert rules.rules == {rule(61000)}
    emu.put("services", service_obj(selector={"app": "other"}))
    await eventually(lambda: ann(emu, "p1") is None)
    assert rules.rules == set()


async def test_restart_keeps_annotated_ports(emu: KubeEmulator,
                                             start_agent: StartAgent) -> None:
    """After a restart the ports in the annotations are kept and restored in one bulk sync."""
    emu.put("nodes", node_obj())
    emu.put("services", service_obj())
    previous = json.dumps([{"podPort": 8080, "nodeIP": "198.18.0.1", "nodePort": 61007,
                            "protocol": "tcp", "ipFamily": "IPv4"}])
    emu.put("pods", pod_obj("p1", annotations={ANN: previous}))
    emu.put("pods", pod_obj("p2", ip="198.18.2.2"))
    rules = FakeRules()
    agent = await start_agent(rules=rules)
    assert rules.syncs[0] == {rule(61007)}  # bulk restore before any worker ran
    await settled(agent)
    assert ann(emu, "p1")[0]["nodePort"] == 61007  # type: ignore[index]
    assert rules.rules == {rule(61007), rule(61000, "198.18.2.2")}
    assert all(p.name != "p1" for p in emu.patches)  # unchanged: never re-written


async def test_exhaustion_warns_and_retries_when_ports_free(emu: KubeEmulator,
                                                            start_agent: StartAgent) -> None:
    """A full range gives a Warning event and a metric; the pod is mapped once a port frees."""
    emu.put("nodes", node_obj())
    emu.put("services", service_obj())
    emu.put("pods", pod_obj("p1"))
    emu.put("pods", pod_obj("p2", ip="198.18.2.2"))
    busy = [("tcp", 61000)]  # another process holds the first port of a 2-port range
    agent = await start_agent(opener=FakeOpener(busy=busy), port_range="61000-61001")
    await eventually(lambda: emu.events)
    event = emu.events[0]
    assert event["type"] == "Warning"
    assert event["reason"] == "NodePortLocalPortsExhausted"
    starved = event["involvedObject"]["name"]
    mapped = "p1" if starved == "p2" else "p2"
    assert ann(emu, starved) is None
    assert agent.metrics.exhausted._value.get() >= 1
    emu.delete("pods", "default", mapped)
    await eventually(lambda: ann(emu, starved))
    assert ann(emu, starved)[0]["nodePort"] == 61001  # type: ignore[index]


async def test_watch_gone_relists_and_sees_missed_deletion(emu: KubeEmulator,
                                                           start_agent: StartAgent) -> None:
    """After 410 Gone the informer re-lists; a deletion it missed still releases the port."""
    emu.put("nodes", node_obj())
    emu.put("services", service_obj())
    emu.put("pods", pod_obj("p1"))
    rules = FakeRules()
    await start_agent(rules=rules)
    await eventually(lambda: rules.rules == {rule(61000)})
    # Delete without telling watchers, then expire history: only a re-list can notice.
    emu.delete("pods", "default", "p1", notify=False)
    emu.compact()
    await eventually(lambda: rules.rules == set())


async def test_metrics_and_health_endpoint(emu: KubeEmulator, start_agent: StartAgent) -> None:
    """/healthz is 200 once restored and /metrics exposes the mapping gauge."""
    emu.put("nodes", node_obj())
    emu.put("services", service_obj())
    emu.put("pods", pod_obj("p1"))
    agent = await start_agent()
    await eventually(lambda: ann(emu, "p1"))
    runner = await serve(make_app(registries=(agent.metrics.registry,),
                                  healthy=agent.restored.is_set),
                         host="127.0.0.1", port=0)
    try:
        port = runner.addresses[0][1]
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/healthz") as resp:
                assert resp.status == 200
            async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
                text = await resp.text()
        assert 'podway_npl_mappings{protocol="tcp"} 1.0' in text
        assert "podway_npl_sync_duration_seconds_count" in text
    finally:
        await runner.cleanup()


async def test_service_type_change_and_deletion_release(emu: KubeEmulator,
                                                        start_agent: StartAgent) -> None:
    """A Service turned NodePort stops mapping; LoadBalancer maps; deleting it releases."""
    emu.put("nodes", node_obj())
    emu.put("services", service_obj(type_="NodePort"))
    emu.put("pods", pod_obj("p1"))
    rules = FakeRules()
    agent = await start_agent(rules=rules)
    await settled(agent)  # the pod's reconcile (rules and annotation) is over
    assert rules.rules == set()
    assert ann(emu, "p1") is None
    emu.put("services", service_obj(type_="LoadBalancer"))
    await eventually(lambda: rules.rules == {rule(61000)})
    emu.delete("services", "default", "web")
    await eventually(lambda: rules.rules == set())
    await eventually(lambda: ann(emu, "p1") is None)


async def test_unknown_node_address_never_wipes_annotation(emu: KubeEmulator,
                                                           start_agent: StartAgent) -> None:
    """Without a node address the agent keeps the existing annotation instead of removing it."""
    emu.put("nodes", {"metadata": {"name": NODE}, "status": {"addresses": []}})
    emu.put("services", service_obj())
    previous = json.dumps([{"podPort": 8080, "nodeIP": "198.18.0.1", "nodePort": 61003,
                            "protocol": "tcp", "ipFamily": "IPv4"}])
    emu.put("pods", pod_obj("p1", annotations={ANN: previous}))
    rules = FakeRules()
    agent = await start_agent(rules=rules)
    await settled(agent)  # the reconcile, and the patch it would have sent, are over
    assert emu.annotation("default", "p1", ANN) == previous
    assert rules.rules == {rule(61003)}
    assert emu.patches == []


async def test_failed_allocation_rolls_back_so_every_annotated_port_has_a_rule(
        emu: KubeEmulator, start_agent: StartAgent) -> None:
    """An EMFILE mid-reconcile releases that reconcile's ports: annotation, table, rules agree."""
    emu.put("nodes", node_obj())
    emu.put("services", service_obj(ports=[{"port": 80, "targetPort": 8080, "protocol": "TCP"},
                                           {"port": 53, "targetPort": 5353, "protocol": "UDP"}]))
    emu.put("pods", pod_obj("p1"))
    opener = FakeOpener()
    opener.fail_next = {"tcp": errno.EMFILE}  # UDP 5353 is allocated first, then TCP fails
    rules = FakeRules()
    agent = await start_agent(rules=rules, opener=opener)
    await eventually(lambda: len(ann(emu, "p1") or []) == 2)
    annotated = {(e["protocol"], e["nodePort"]) for e in ann(emu, "p1") or []}
    # the retry succeeded; the queue forgets the failure just after the annotation is written
    await eventually(lambda: agent.queue.failures("default/p1") == 0)
    assert {r.key for r in rules.rules} == annotated
    assert opener.held == annotated
    assert {(e.protocol, e.node_port) for e in agent.table} == annotated


async def test_resync_installs_table_entries_the_backend_never_heard_of(
        emu: KubeEmulator, start_agent: StartAgent) -> None:
    """Resync derives the wanted rules from the port table, so a lost rule comes back."""
    emu.put("nodes", node_obj())
    emu.put("services", service_obj())
    emu.put("pods", pod_obj("p1"))
    rules = FakeRules()
    agent = await start_agent(rules=rules)
    await eventually(lambda: rules.rules == {rule(61000)})
    rules.kernel.clear()  # as if the rule had never reached the backend
    await agent.resync()
    assert rules.rules == {rule(61000)}
    assert rules.repairs == 1


def claiming(name: str, ip: str, created: str, port: int = 61003) -> dict[str, Any]:
    """A pod whose (stale) annotation claims ``port``, created at ``created``."""
    value = json.dumps([{"podPort": 8080, "nodeIP": "198.18.0.1", "nodePort": port,
                         "protocol": "tcp", "ipFamily": "IPv4"}])
    obj = pod_obj(name, ip=ip, annotations={ANN: value})
    obj["metadata"]["creationTimestamp"] = created
    return obj


async def test_restore_conflict_prefers_the_mapping_in_the_kernel(
        emu: KubeEmulator, start_agent: StartAgent) -> None:
    """Two pods claiming one port: the one the kernel routes to keeps it, the other moves."""
    emu.put("nodes", node_obj())
    emu.put("services", service_obj())
    emu.put("pods", claiming("p1", "198.18.1.2", "2026-01-01T00:00:00Z"))  # older, listed first
    emu.put("pods", claiming("p2", "198.18.2.2", "2026-01-02T00:00:00Z"))
    rules = FakeRules()
    rules.kernel = {("tcp", 61003): rule(61003, "198.18.2.2")}
    await start_agent(rules=rules)
    assert rules.syncs[0] == {rule(61003, "198.18.2.2")}
    await eventually(lambda: ann(emu, "p1")[0]["nodePort"] != 61003)  # type: ignore[index]
    assert ann(emu, "p2")[0]["nodePort"] == 61003  # type: ignore[index]


async def test_restore_conflict_without_kernel_state_prefers_the_oldest_pod(
        emu: KubeEmulator, start_agent: StartAgent) -> None:
    """Two pods claiming one port, none in the kernel: the oldest pod keeps it."""
    emu.put("nodes", node_obj())
    emu.put("services", service_obj())
    emu.put("pods", claiming("young", "198.18.2.2", "2026-01-02T00:00:00Z"))  # listed first
    emu.put("pods", claiming("old", "198.18.1.2", "2026-01-01T00:00:00Z"))
    rules = FakeRules()
    await start_agent(rules=rules)
    assert rules.syncs[0] == {rule(61003, "198.18.1.2")}
    await eventually(lambda: ann(emu, "young")[0]["nodePort"] != 61003)  # type: ignore[index]
    assert ann(emu, "old")[0]["nodePort"] == 61003  # type: ignore[index]


class BrokenRules(FakeRules):
    """A backend whose drift check fails the way a missing tool used to (FileNotFoundError)."""

    async def repair(self, want: Callable[[], Iterable[Rule]]) -> bool:
        raise FileNotFoundError(2, "No such file or directory", "nft")


async def test_resync_failure_is_logged_not_fatal(emu: KubeEmulator,
                                                  start_agent: StartAgent) -> None:
    """A resync whose backend raises an OS error is counted and the agent keeps running."""
    emu.put("nodes", node_obj())
    agent = await start_agent(rules=BrokenRules())
    await agent.resync()
    assert agent.metrics.errors.labels(stage="resync")._value.get() == 1


async def test_churn_with_frequent_resync_finds_no_drift(emu: KubeEmulator,
                                                         start_agent: StartAgent) -> None:
    """Bulk pod adds and removes while resync runs every few ms: 0 drift repairs, as nothing
    touched the kernel behind the agent's back (the resync must not race the reconcile)."""
    emu.put("nodes", node_obj())
    emu.put("services", service_obj())
    rules = SlowRules()
    agent = await start_agent(rules=rules, resync=0.003, port_range="61000-61100")
    for _ in range(3):
        for i in range(30):
            emu.put("pods", pod_obj(f"p{i}", ip=f"198.18.1.{i + 10}"))
        await eventually(lambda: len(rules.rules) == 30, within=20)
        for i in range(30):
            emu.delete("pods", "default", f"p{i}")
        await eventually(lambda: rules.rules == set(), within=20)
    assert rules.repairs == 0
    assert agent.metrics.drift_repairs._value.get() == 0
    # A real difference is still repaired: the kernel loses a rule behind the agent's back.
    emu.put("pods", pod_obj("p1"))
    await eventually(lambda: len(rules.rules) == 1)
    rules.kernel.clear()
    await eventually(lambda: rules.repairs == 1)
    assert len(rules.rules) == 1
