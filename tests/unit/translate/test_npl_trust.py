"""Which NodePortLocal annotations become members (issue 23.9): beyond the operator's own
manifests, a mapping must point at the pod's node (status.hostIP) inside the agents' port range,
and with ``NplTrust.SIGNED`` carry the signature of that annotation on that pod made with the key
of the pod's own node (``npl.node_key``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from podway.model import EndpointSlice, K8sObject, Pod, Service, Snapshot, npl
from podway.translate import BackendMode, NplTrust, Reason, TranslateOptions, translate
from tests import builders

KEY = b"s" * 32  # the controller's master key
N1 = npl.node_key(KEY, "n1")  # what the agent of n1 (web-0's node) signs with
HOST = "198.18.0.7"


def service() -> Service:
    return Service.model_validate(builders.service(
        "web", 80, 8080, type_="LoadBalancer", namespace="ns", port_name=None, protocol=None))


def endpoints() -> EndpointSlice:
    return EndpointSlice.model_validate({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-1", "namespace": "ns",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "ports": [{"port": 8080}],
        "endpoints": [{"addresses": ["198.18.1.1"], "nodeName": "n1",
                       "targetRef": {"kind": "Pod", "name": "web-0", "namespace": "ns"}}]})


def pod(entry: dict[str, Any], *, uid: str = "uid-1", host_ip: str | None = HOST,
        signed_by: tuple[bytes, str] | None = None, signature: str | None = None) -> Pod:
    """web-0 with ``entry`` as its annotation; ``signed_by`` (key, uid): signed as the agent
    of that key would sign it for the pod of that uid."""
    value = json.dumps([entry])
    annotations = {npl.ANNOTATION: value}
    if signed_by is not None:
        annotations[npl.SIGNATURE_ANNOTATION] = npl.signature(signed_by[0], uid=signed_by[1],
                                                              value=value)
    if signature is not None:
        annotations[npl.SIGNATURE_ANNOTATION] = signature
    return Pod.model_validate(builders.pod("web-0", "198.18.1.1", namespace="ns", uid=uid,
                                           annotations=annotations, host_ip=host_ip))


def entry(node_ip: str = HOST, node_port: int = 61005) -> dict[str, Any]:
    return {"podPort": 8080, "nodeIP": node_ip, "nodePort": node_port, "protocol": "tcp"}


def served(objects: list[K8sObject], trust: NplTrust) -> tuple[list[str], list[str]]:
    opts = TranslateOptions(mode=BackendMode.NODEPORTLOCAL, npl_trust=trust, npl_key=KEY)
    result = translate(Snapshot.of_objects([service(), endpoints(), *objects]), opts)
    pool = result.ir.pools["pool/ns/web/80/tcp"]
    why = [p.message for p in result.problems if p.reason is Reason.UNTRUSTED_MAPPING]
    return [f"{m.address}:{m.port}" for m in pool.members], why


def test_the_agents_signed_mapping_is_served() -> None:
    assert served([pod(entry(), signed_by=(N1, "uid-1"))], NplTrust.SIGNED) == (
        [f"{HOST}:61005"], [])


@pytest.mark.parametrize(("what", "forged", "words"), [
    ("unsigned", pod(entry()), "not signed"),
    ("signed with another key", pod(entry(), signed_by=(b"x" * 32, "uid-1")), "not signed"),
    ("another pod's signature", pod(entry(), signed_by=(N1, "uid-2")), "not signed"),
    ("a made-up signature", pod(entry(), signature="v1:AAAA"), "not signed"),
    # Root on another node holds that node's key only: it signs for no pod of n1 (23.9).
    ("another node's agent", pod(entry(), signed_by=(npl.node_key(KEY, "n2"), "uid-1")),
     "not signed"),
    ("the master key itself", pod(entry(), signed_by=(KEY, "uid-1")), "not signed"),
    ("the pod's IP", pod(entry("198.18.1.1", 8080), signed_by=(N1, "uid-1")),
     "not the pod's node"),
    ("any address", pod(entry("203.0.113.9", 443), signed_by=(N1, "uid-1")),
     "not the pod's node"),
    ("outside the range", pod(entry(node_port=22), signed_by=(N1, "uid-1")),
     "outside the agents' range"),
    ("no hostIP yet", pod(entry(), host_ip=None, signed_by=(N1, "uid-1")), "no status.hostIP"),
])
def test_a_mapping_the_agent_does_not_vouch_for_steers_nothing(what: str, forged: Pod,
                                                               words: str) -> None:
    members, why = served([forged], NplTrust.SIGNED)
    assert members == [], what
    assert len(why) == 1, why
    assert words in why[0], why


def test_without_signatures_the_node_and_range_are_still_checked() -> None:
    """``--npl-unsigned`` (Antrea's agent): node and range decide; a signature is not asked."""
    assert served([pod(entry())], NplTrust.NODE)[0] == [f"{HOST}:61005"]
    assert served([pod(entry("203.0.113.9", 61005))], NplTrust.NODE)[0] == []
    assert served([pod(entry(node_port=70))], NplTrust.NODE)[0] == []


def test_the_operators_own_manifests_are_believed() -> None:
    """Standalone (files): the manifests are the operator's, as before."""
    assert served([pod(entry("203.0.113.9", 443), host_ip=None)], NplTrust.FILES)[0] == [
        "203.0.113.9:443"]


def test_the_controller_believes_no_mapping_until_told_how() -> None:
    """`podway controller` with neither --npl-key nor --npl-unsigned: fail closed. Its options
    ask for a signature and hold no key, so no annotation (a tenant may have written it) makes
    a member; the warning names both flags."""
    from podway.cli.commands.controller import npl_settings

    fields, warnings = npl_settings(None, unsigned=False, port_range="61000-62000")
    assert fields["npl_trust"] is NplTrust.SIGNED
    assert fields["npl_key"] is None
    assert len(warnings) == 1
    assert "--npl-key" in warnings[0]
    assert "--npl-unsigned" in warnings[0]
    assert "fail closed" in warnings[0]
    unsigned, none = npl_settings(None, unsigned=True, port_range="61000-62000")
    assert (unsigned["npl_trust"], none) == (NplTrust.NODE, ())
    opts = TranslateOptions(mode=BackendMode.NODEPORTLOCAL, **fields)
    result = translate(Snapshot.of_objects([service(), endpoints(),
                                            pod(entry(), signed_by=(N1, "uid-1"))]), opts)
    assert result.ir.pools["pool/ns/web/80/tcp"].members == ()  # no key: even a signed one


def test_handing_out_keys_needs_the_master() -> None:
    """--npl-agent without --npl-key: one line, there is nothing to derive keys from."""
    from podway.base.errors import ConfigError
    from podway.cli.commands.controller import npl_settings

    with pytest.raises(ConfigError, match="--npl-agent needs --npl-key"):
        npl_settings(None, unsigned=False, port_range="61000-62000",
                     agent="system:serviceaccount:podway-system:podway-agent")
