"""A VIPPeer's status as ``kubectl get vippeers`` shows it: each engine host writes its own
entry of ``status.nodes`` and ``status.established`` (``established/hosts``), the chart CRD's
Established column. Hosts writing at the same moment each count the others' entries (the write
is conditional on the version read), so the count never misses a host."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from podway.kube.emulator import KubeEmulator
from podway.programs.lab.controlplane import install_podway_crds
from podway.programs.vip.metallb_sessions import Report
from podway.programs.vip.podway_bgp import PREFIX
from podway.programs.vip.podway_bgp_status import PeerStatus, summary
from tests.unit.kube.test_emulator_kubectl_session import Kubectl

GROUP = "podway.io"


def report(state: str) -> Report:
    return Report(peer=f"{PREFIX}rtr-a", address="198.18.151.1", bgp=state, bfd="N/A")


def test_the_summary_counts_established_hosts_of_all() -> None:
    assert summary({}) == "0/0"
    assert summary({"a": {"established": True}, "b": {"established": False},
                    "c": {"established": True}}) == "2/3"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
async def test_kubectl_get_vippeers_has_an_established_column(tmp_path: Path) -> None:
    async with KubeEmulator() as emu:
        assert "vippeers.podway.io" in install_podway_crds(emu)
        emu.put("vippeers", {"apiVersion": f"{GROUP}/v1alpha1", "kind": "VIPPeer",
                             "metadata": {"name": "rtr-a"},
                             "spec": {"address": "198.18.151.1", "asn": 65000,
                                      "localASN": 65001}}, group=GROUP)
        api = client.ApiClient(client.Configuration(host=emu.url))
        try:
            hosts = [PeerStatus(api, node=f"eng{i}") for i in range(1, 4)]
            # all three at once: every write but one meets a newer version and counts again
            await asyncio.gather(hosts[0].write([report("Established")]),
                                 hosts[1].write([report("Active")]),
                                 hosts[2].write([report("Established")]))
            status: dict[str, Any] = emu.get("vippeers", "", "rtr-a", group=GROUP)["status"]
            assert sorted(status["nodes"]) == ["eng1", "eng2", "eng3"]
            assert status["established"] == "2/3"
            kubectl = Kubectl(emu, tmp_path / "cache")
            rows = (await kubectl.out("get", "vippeers")).splitlines()
            assert rows[0].split()[:6] == ["NAME", "ADDRESS", "ASN", "LOCAL", "ASN",
                                           "ESTABLISHED"]
            assert rows[1].split()[:5] == ["rtr-a", "198.18.151.1", "65000", "65001", "2/3"]
            await hosts[1].write([report("Established")])
            await hosts[2].write([])  # eng3 no longer has the session: its entry goes
            assert (await kubectl.out("get", "vippeers")).splitlines()[1].split()[4] == "2/2"
        finally:
            await api.close()
