"""Forged NodePortLocal annotations steer nothing (issue 23.9): the agent signs the mappings it
writes (``podway.io/npl-signature``, keyed by the pod's uid, with its node's key) and re-writes a
forged one; the controller's check (``npl_untrusted`` with ``NplTrust.SIGNED``) believes only
the agent's; a restarted agent adopts only mappings signed with its node's key."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from fakes import FakeRules
from harness import StartAgent
from tests.waiting import eventually

from builders import NODE, node_obj, pod_obj, service_obj, settled
from podway.kube.emulator import KubeEmulator
from podway.model import Pod, npl
from podway.translate import NplTrust, TranslateOptions
from podway.translate.pools.members import npl_untrusted

KEY = b"k" * 32  # the controller's master key
NODE_KEY = npl.node_key(KEY, NODE)  # the only key this node's agent holds
OPTS = TranslateOptions(npl_trust=NplTrust.SIGNED, npl_key=KEY, npl_port_range=(61000, 61009))
HOST = "198.18.0.1"


def pod(emu: KubeEmulator, name: str, ns: str = "default") -> Pod:
    raw = emu.get("pods", ns, name)
    assert raw is not None
    return Pod.model_validate({**raw, "apiVersion": "v1", "kind": "Pod"})


def believed(emu: KubeEmulator, name: str, ns: str = "default") -> set[tuple[str, int]]:
    """The (nodeIP, nodePort) a controller would make members of for this pod, now."""
    found = pod(emu, name, ns)
    entries, _ = npl.decode(found.metadata.annotations.get(npl.ANNOTATION))
    return {(e.node_ip, e.node_port) for e in entries if npl_untrusted(found, e, OPTS) is None}


def forge(emu: KubeEmulator, name: str, entries: list[dict[str, Any]],
          ns: str = "default", signature: str | None = None) -> None:
    """What a tenant allowed to patch its own pod does."""
    raw = emu.get("pods", ns, name)
    assert raw is not None
    annotations = {**raw["metadata"].get("annotations", {}), npl.ANNOTATION: json.dumps(entries)}
    if signature is not None:
        annotations[npl.SIGNATURE_ANNOTATION] = signature
    emu.put("pods", {**raw, "metadata": {**raw["metadata"], "annotations": annotations}})


def running(name: str, ip: str, ns: str = "default", app: str = "web") -> dict[str, Any]:
    made = pod_obj(name, ip=ip, ns=ns, labels={"app": app})
    made["status"]["hostIP"] = HOST
    return made


async def test_forged_mappings_are_never_believed_and_the_agents_still_serve(
        emu: KubeEmulator, start_agent: StartAgent) -> None:
    emu.put("nodes", node_obj(internal=HOST))
    emu.put("services", service_obj("web"))
    emu.put("services", service_obj("bank", ns="bank", selector={"app": "bank"}))
    emu.put("pods", running("tenant", "198.18.1.2"))
    emu.put("pods", running("vault", "198.18.1.3", ns="bank", app="bank"))
    agent = await start_agent(npl_key=NODE_KEY, port_range="61000-61009")
    await eventually(lambda: believed(emu, "tenant") and believed(emu, "vault", "bank"))
    own, = believed(emu, "tenant")
    victim, = believed(emu, "vault", "bank")
    assert own != victim
    signed = emu.get("pods", "bank", "vault")["metadata"]["annotations"]  # type: ignore[index]
    forgeries = [
        # the other namespace's pod: its node port, on the right node
        ([{"podPort": 8080, "nodeIP": HOST, "nodePort": victim[1], "protocol": "tcp"}], None),
        # its pod IP and port directly, and any address the engines reach
        ([{"podPort": 8080, "nodeIP": "198.18.1.3", "nodePort": 8080, "protocol": "tcp"}], None),
        ([{"podPort": 8080, "nodeIP": "203.0.113.9", "nodePort": 443, "protocol": "tcp"}], None),
        # the victim's signed annotation copied over, signature and all
        (json.loads(signed[npl.ANNOTATION]), signed[npl.SIGNATURE_ANNOTATION]),
    ]
    for _ in range(5):  # re-forged again and again, as fast as the agent repairs it
        for entries, signature in forgeries:
            forge(emu, "tenant", entries, signature=signature)
            assert believed(emu, "tenant") <= {own}
            await asyncio.sleep(0.05)
            assert believed(emu, "tenant") <= {own}
    await settled(agent)
    await eventually(lambda: believed(emu, "tenant") == {own})  # the agent's mapping is back
    assert believed(emu, "vault", "bank") == {victim}
    assert pod(emu, "tenant").spec.node_name == NODE


async def test_the_agent_signs_what_it_writes_and_removes_the_signature_with_it(
        emu: KubeEmulator, start_agent: StartAgent) -> None:
    emu.put("nodes", node_obj(internal=HOST))
    emu.put("services", service_obj("web"))
    emu.put("pods", running("p1", "198.18.1.2"))
    agent = await start_agent(npl_key=NODE_KEY, port_range="61000-61009")
    await eventually(lambda: emu.annotation("default", "p1", npl.SIGNATURE_ANNOTATION))
    found = pod(emu, "p1")
    assert npl.vouched(NODE_KEY, uid=found.metadata.uid,
                       value=found.metadata.annotations[npl.ANNOTATION],
                       signed=found.metadata.annotations[npl.SIGNATURE_ANNOTATION])
    emu.put("services", service_obj("web", enabled=None))  # opted out: mapping released
    await eventually(lambda: emu.annotation("default", "p1", npl.ANNOTATION) is None)
    await settled(agent)
    assert emu.annotation("default", "p1", npl.SIGNATURE_ANNOTATION) is None


def signed_pod(emu: KubeEmulator, made: dict[str, Any], entries: list[dict[str, Any]],
               key: bytes) -> None:
    """``made`` stored with ``entries`` as its annotation, signed with ``key`` for its uid."""
    stored = emu.put("pods", made)
    value = npl.encode(npl.decode(json.dumps(entries))[0])
    assert value is not None
    stored["metadata"]["annotations"] = {
        npl.ANNOTATION: value,
        npl.SIGNATURE_ANNOTATION: npl.signature(key, uid=stored["metadata"]["uid"], value=value)}
    emu.put("pods", stored)


@pytest.mark.parametrize("forger_key", [None, npl.node_key(KEY, "another-node"), KEY],
                         ids=["unsigned", "another node's key", "the master key"])
async def test_a_restarted_agent_does_not_adopt_a_forged_mapping(
        emu: KubeEmulator, start_agent: StartAgent, forger_key: bytes | None) -> None:
    """While the agent is away, a tenant points its (older) pod at the port of another
    namespace's pod. On restart the oldest claim of a port would win: only the signature
    keeps the victim's port, and traffic, where it was."""
    emu.put("nodes", node_obj(internal=HOST))
    emu.put("services", service_obj("web"))
    emu.put("services", service_obj("bank", ns="bank", selector={"app": "bank"}))
    port = 61004
    mapping = [{"podPort": 8080, "nodeIP": HOST, "nodePort": port, "protocol": "tcp"}]
    tenant = running("tenant", "198.18.1.2")
    tenant["metadata"]["creationTimestamp"] = "2020-01-01T00:00:00Z"  # the older claim
    vault = running("vault", "198.18.1.3", ns="bank", app="bank")
    vault["metadata"]["creationTimestamp"] = "2021-01-01T00:00:00Z"
    signed_pod(emu, vault, mapping, NODE_KEY)  # what the agent wrote before its restart
    if forger_key is None:
        emu.put("pods", tenant)
        forge(emu, "tenant", mapping)
    else:
        signed_pod(emu, tenant, mapping, forger_key)
    rules = FakeRules()
    agent = await start_agent(npl_key=NODE_KEY, port_range="61000-61009", rules=rules)
    restored = rules.syncs[0]  # the bulk sync of what the restart adopted
    assert [(r.node_port, r.pod_ip) for r in restored] == [(port, "198.18.1.3")]
    await settled(agent)
    assert believed(emu, "vault", "bank") == {(HOST, port)}
    tenant_now = believed(emu, "tenant")
    assert len(tenant_now) == 1
    assert (HOST, port) not in tenant_now
