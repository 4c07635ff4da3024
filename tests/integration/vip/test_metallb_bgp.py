"""MetalLB's BGP objects read live from the API drive a real BIRD in a network namespace, peering
with two real BIRD routers:

    router1 198.18.151.1 (AS 65000, MD5 password, BFD) ── .151.2 engine .152.2 ── .152.1 router2
                                                                (AS 65001)          (AS 65002)

The engine's speaker (``MetalLBSpeaker``, in this process, running BIRD in the engine's
namespace) reads the objects from the API emulator. Router1's session uses the password from a
basic-auth Secret and the BFD profile's timers, and learns the pool with the advertisement's
community; a peer added later comes up and gets its own advertisement while router1's session
stays as it was (not restarted); a peer whose node selector stops selecting the node goes away;
``sessions`` reports each session's state from BIRD. Only 198.18.0.0/15; everything made is
removed, also on failure."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from podway.kube.emulator import KubeEmulator
from podway.programs.vip.bird import BgpSettings, Neighbor, router_config
from podway.programs.vip.metallb_live import CUSTOM, MetalLBSpeaker
from podway.programs.vip.metallb_sessions import SessionMetrics, SessionStates, follow_sessions
from tests.integration.vip.bed import sh

pytestmark = pytest.mark.netns
NS = "metallb-system"
POOL = "198.18.160.0/28"


def crd(kind: str, version: str, plural: str) -> dict[str, Any]:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.metallb.io"},
            "spec": {"group": "metallb.io", "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower(),
                               "listKind": f"{kind}List"},
                     "versions": [{"name": version, "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {
                                       "type": "object",
                                       "x-kubernetes-preserve-unknown-fields": True}},
                                   "subresources": {"status": {}}}]}}


def mlb(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    version = CUSTOM[kind][0] if kind in CUSTOM else "v1beta1"
    return {"apiVersion": f"metallb.io/{version}", "kind": kind,
            "metadata": {"name": name, "namespace": NS}, "spec": spec}


class Net:
    """Three namespaces, two routers running BIRD; ``close`` removes all of it."""

    def __init__(self, root: Path) -> None:
        tag = uuid.uuid4().hex[:6]
        self.eng, self.r1, self.r2 = (f"pwvip{tag}-{n}" for n in ("eng", "rtr1", "rtr2"))
        self.dir = root
        self.made: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    def open(self) -> None:
        for ns in (self.eng, self.r1, self.r2):
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
        for i, (router, asn, password) in enumerate(
                ((self.r1, 65000, "s3cret"), (self.r2, 65002, None)), start=1):
            net = f"198.18.15{i}"
            sh("ip", "link", "add", f"eth{i}", "type", "veth", "peer", "name", "up0",
               "netns", router, ns=self.eng)
            sh("ip", "addr", "add", f"{net}.2/24", "dev", f"eth{i}", ns=self.eng)
            sh("ip", "link", "set", f"eth{i}", "up", ns=self.eng)
            sh("ip", "addr", "add", f"{net}.1/24", "dev", "up0", ns=router)
            sh("ip", "link", "set", "up0", "up", ns=router)
            settings = BgpSettings(router_id=f"{net}.1", local_as=asn, bfd=i == 1,
                                   password=password,
                                   neighbors=(Neighbor(address=f"{net}.2", asn=65001,
                                                       name="engine"),))
            where = self.dir / f"rtr{i}"
            where.mkdir()
            (where / "bird.conf").write_text(router_config(settings))
            self.procs.append(subprocess.Popen(
                ["ip", "netns", "exec", router, "bird", "-f", "-c", str(where / "bird.conf"),
                 "-s", str(where / "bird.ctl"), "-P", str(where / "pid")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))

    def birdc(self, i: int, *command: str) -> str:
        router = (self.r1, self.r2)[i - 1]
        done = subprocess.run(["ip", "netns", "exec", router, "birdc", "-s",
                               str(self.dir / f"rtr{i}" / "bird.ctl"), *command],
                              capture_output=True, text=True, check=False)
        return done.stdout

    def session(self, i: int) -> str:
        """The router's line for its session with the engine ("" while BIRD does not
        answer)."""
        return next((line for line in self.birdc(i, "show", "protocols").splitlines()
                     if line.startswith("engine ")), "")

    def close(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait()
        for ns in self.made:
            subprocess.run(["ip", "netns", "del", ns], check=False)


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    missing = [t for t in ("ip", "bird", "birdc") if shutil.which(t) is None]
    return f"not installed: {', '.join(missing)}" if missing else None


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[Net, KubeEmulator, client.ApiClient]]:
    why = skip_reason()
    if why is not None:
        pytest.skip(why)
    net = Net(tmp_path)
    try:
        net.open()
        async with KubeEmulator() as emu:
            api = client.ApiClient(client.Configuration(host=emu.url))
            try:
                yield net, emu, api
            finally:
                await api.close()
    finally:
        net.close()


async def until(check: Callable[[], bool], within: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        await asyncio.sleep(0.2)


async def test_bgp_objects_from_the_api_configure_bird_live(
        world: tuple[Net, KubeEmulator, client.ApiClient], tmp_path: Path) -> None:
    net, emu, api = world
    for kind, (version, plural) in {**CUSTOM, "BGPSessionState": ("v1beta1",
                                                                  "bgpsessionstates")}.items():
        emu.put("customresourcedefinitions", crd(kind, version, plural))
    emu.put("nodes", {"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": "eng1", "labels": {"rack": "a"}}})
    emu.put("secrets", {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/basic-auth",
                        "metadata": {"name": "bgp-auth", "namespace": NS},
                        "data": {"password": base64.b64encode(b"s3cret").decode()}})
    emu.put("ipaddresspools", mlb("IPAddressPool", "public", {"addresses": [POOL]}),
            group="metallb.io")
    emu.put("bfdprofiles", mlb("BFDProfile", "fast", {"receiveInterval": 100,
                                                       "transmitInterval": 100}),
            group="metallb.io")
    emu.put("bgppeers", mlb("BGPPeer", "rtr-a", {
        "myASN": 65001, "peerASN": 65000, "peerAddress": "198.18.151.1", "bfdProfile": "fast",
        "passwordSecret": {"name": "bgp-auth", "namespace": NS}}), group="metallb.io")
    emu.put("bgpadvertisements", mlb("BGPAdvertisement", "to-a", {
        "ipAddressPools": ["public"], "peers": ["rtr-a"], "communities": ["65001:42"]}),
        group="metallb.io")
    speaker = MetalLBSpeaker(api, namespace=NS, node="eng1", router_id="198.18.151.2",
                             workdir=tmp_path / "eng", prefix=("ip", "netns", "exec", net.eng),
                             debounce_s=0.1)
    task = asyncio.create_task(speaker.run())
    metrics = SessionMetrics()
    states = SessionStates(api, namespace=NS, node="eng1")
    reporter = asyncio.create_task(follow_sessions(speaker, metrics, states, interval=0.3))

    def state(peer: str) -> dict[str, Any]:
        found = emu.get("bgpsessionstates", NS, f"eng1-{peer}", group="metallb.io")
        return dict((found or {}).get("status") or {})

    try:
        await until(lambda: "(65001,42)" in net.birdc(1, "show", "route", "for", POOL, "all"),
                    30, "router1 learns the pool with the community")
        assert "Established" in net.session(1)
        assert " Up " in net.birdc(1, "show", "bfd", "sessions")  # the profile's BFD session
        assert oct((tmp_path / "eng" / "bird.conf").stat().st_mode & 0o777) == "0o600"
        before = net.session(1)

        # A second peer, and an advertisement for it: router2 learns the pool (no community);
        # router1's session is the same (same "since": not restarted).
        emu.put("bgppeers", mlb("BGPPeer", "rtr-b", {
            "myASN": 65001, "peerASN": 65002, "peerAddress": "198.18.152.1",
            "nodeSelectors": [{"matchLabels": {"rack": "a"}}]}), group="metallb.io")
        emu.put("bgpadvertisements", mlb("BGPAdvertisement", "to-b", {
            "ipAddressPools": ["public"], "peers": ["rtr-b"]}), group="metallb.io")
        await until(lambda: POOL in net.birdc(2, "show", "route", "for", POOL), 30,
                    "router2 learns the pool")
        assert "(65001,42)" not in net.birdc(2, "show", "route", "for", POOL, "all")
        assert net.session(1) == before
        sessions = {s.name: s for s in await speaker.sessions()}
        assert sessions["peer_rtr_a"].established
        assert sessions["peer_rtr_b"].established
        # Reported as MetalLB's BGPSessionState objects and as metrics.
        await until(lambda: state("rtr-b").get("bgpStatus") == "Established", 10,
                    "rtr-b's session state written")
        assert state("rtr-a") == {"bgpStatus": "Established", "bfdStatus": "Up",
                                  "node": "eng1", "peer": "198.18.151.1"}
        assert state("rtr-b")["bfdStatus"] == "N/A"
        text = metrics.render().decode()
        assert 'podway_vip_bgp_session_established{address="198.18.152.1",peer="rtr-b"} 1.0' \
            in text

        # rtr-b no longer selects this node: its session goes, router1's stays.
        emu.put("bgppeers", mlb("BGPPeer", "rtr-b", {
            "myASN": 65001, "peerASN": 65002, "peerAddress": "198.18.152.1",
            "nodeSelectors": [{"matchLabels": {"rack": "b"}}]}), group="metallb.io")
        await until(lambda: POOL not in net.birdc(2, "show", "route", "for", POOL), 30,
                    "router2 loses the pool")
        assert [s.name for s in await speaker.sessions()] == ["peer_rtr_a"]
        assert net.session(1) == before
        await until(lambda: emu.get("bgpsessionstates", NS, "eng1-rtr-b",
                                    group="metallb.io") is None, 10, "rtr-b's state deleted")
        assert "rtr-b" not in metrics.render().decode()
    finally:
        for running in (reporter, task):
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
        await speaker.stop()
