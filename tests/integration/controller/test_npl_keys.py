"""The controller hands each agent its node's NodePortLocal key and believes, for a pod, only
the key of that pod's node (issue 23.9): root on another node, holding its own node's key,
steers nothing on this one."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client

from podway.kube import npl_keys
from podway.model import npl
from podway.programs.agent.keyrequest import request_node_key
from podway.translate import BackendMode, NplTrust

from .bed import Bed, endpoint_slice, lb_service, members, node, options, pod

POOL = "pool/default/web/80/tcp"
MASTER = b"M" * 32
AGENT = "system:serviceaccount:podway-system:podway-agent"


async def key_of(bed: Bed, node_name: str) -> bytes:
    """What the agent of ``node_name`` receives (its token is bound to that node)."""
    token = f"agent-{node_name}"
    bed.emu.add_user(token, AGENT, extra={npl_keys.NODE_EXTRA: [node_name]})
    config = client.Configuration(host=bed.emu.url)
    config.api_key = {"BearerToken": token}
    config.api_key_prefix = {"BearerToken": "Bearer"}
    async with client.ApiClient(configuration=config) as api:
        return await asyncio.wait_for(request_node_key(api, node_name, poll_s=0.05), 10)


def signed(made: dict[str, Any], uid: str, key: bytes) -> dict[str, Any]:
    value = made["metadata"]["annotations"][npl.ANNOTATION]
    made["metadata"]["uid"] = uid
    made["metadata"]["annotations"][npl.SIGNATURE_ANNOTATION] = npl.signature(
        key, uid=uid, value=value)
    return made


async def test_only_the_key_of_the_pods_node_makes_a_member(bed: Bed) -> None:
    bed.emu.put("nodes", node("n1", "198.18.0.11"))
    bed.emu.put("nodes", node("n2", "198.18.0.12"))
    bed.emu.put("services", lb_service("web", 80))
    bed.emu.put("endpointslices", endpoint_slice("web", {"web-a": "198.18.5.1"}),
                group="discovery.k8s.io")
    web = pod("web-a", "198.18.5.1", npl=[(8080, "198.18.0.11", 61000)], node="n1")
    web["status"]["hostIP"] = "198.18.0.11"
    uid = bed.emu.put("pods", web)["metadata"]["uid"]
    bed.translate = options(BackendMode.NODEPORTLOCAL, npl_trust=NplTrust.SIGNED,
                            npl_key=MASTER, npl_port_range=(61000, 61009))
    await bed.start(npl_agent_user=AGENT)
    n1, n2 = await key_of(bed, "n1"), await key_of(bed, "n2")
    assert MASTER not in (n1, n2)
    bed.emu.put("pods", signed(web, uid, n2))  # root on n2 signs for a pod on n1
    state = await bed.until(lambda s: any(
        "not signed by the agent of the pod's node" in p.message for p in s.problems))
    assert members(state, POOL) == []
    bed.emu.put("pods", signed(web, uid, n1))  # n1's agent
    await bed.until(lambda s: members(s, POOL) == ["198.18.0.11:61000"])
