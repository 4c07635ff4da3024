"""``podway vip l2 --from-metallb`` in network namespaces: MetalLB's L2Advertisement, read live
from the API, decides which host may answer for a VIP (``nodeSelectors``) and on which interface
(``interfaces``) — the L2 bed of test_l2.py (client and two engines on a bridge, each engine
with a second interface ``e1``, a veth pair
leading nowhere), the engines' speakers reaching the API emulator
through a loopback forwarder in their namespace and a unix socket (the emulator runs in this
process, in the host's namespace, which the tests leave alone).

The VIP is one the hash gives to eng1 when both may own it: the advertisement that selects
only eng2's Node makes eng2 answer for it; moved to interface ``e1``, it leaves ``e0``; selecting
eng1's Node instead moves it to eng1."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from podway.kube.emulator import KubeEmulator
from podway.programs.vip.l2 import owner
from tests.integration.vip.test_l2 import ENGINES, PODWAY, L2Bed, sh, unavailable
from tests.integration.vip.test_metallb_bgp import crd, mlb
from tests.waiting import eventually

pytestmark = pytest.mark.netns
NS = "metallb-system"
# The first address of the bridge's subnet that the hash gives to eng1 among both engines.
VIP = next(v for v in (f"198.18.90.{i}" for i in range(100, 140))
           if owner(v, list(ENGINES)) == "eng1")
API_PORT = 6443  # inside each engine's own namespace

FORWARD = r"""
import asyncio, sys

async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()

async def handle(reader, writer):
    up_reader, up_writer = await asyncio.open_unix_connection(sys.argv[2])
    await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]))
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


async def _to_emulator(emu: KubeEmulator, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
    host, port = emu.url.removeprefix("http://").rsplit(":", 1)
    up_reader, up_writer = await asyncio.open_connection(host, int(port))

    async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        except OSError:
            pass
        finally:
            w.close()

    await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


@pytest.fixture
async def bed(tmp_path: Path) -> AsyncIterator[tuple[L2Bed, KubeEmulator]]:
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    made = L2Bed(tmp_path)
    made.start_speaker = lambda name: None  # type: ignore[method-assign]  # started below
    socket_path = tmp_path / "api.sock"
    async with KubeEmulator() as emu:
        server = await asyncio.start_unix_server(
            lambda r, w: _to_emulator(emu, r, w), path=str(socket_path))
        try:
            made.open()
            for name in ENGINES:
                sh("ip", "link", "add", "e1", "type", "veth", "peer", "name", "e1p",
                   ns=made.ns[name])
                for device in ("e1", "e1p"):
                    sh("ip", "link", "set", device, "up", ns=made.ns[name])
                made.spawn(name, [sys.executable, "-c", FORWARD, str(API_PORT),
                                  str(socket_path)])
            yield made, emu
        finally:
            made.close()
            server.close()
            with contextlib.suppress(Exception):
                await server.wait_closed()


def start(bed: L2Bed, name: str) -> None:
    kubeconfig = bed.dir / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": f"http://127.0.0.1:{API_PORT}"}}],
        "users": [{"name": "lab", "user": {}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "lab"}}]}))
    other = next(n for n in ENGINES if n != name)
    bed.spawn(name, [*PODWAY, "vip", "l2", "--node", name, "--interface", "e0",
                     "--listen", f"{ENGINES[name]}:7946",
                     "--peer", f"{other}={ENGINES[other]}:7946", "--vip", VIP,
                     "--key-file", str(bed.key), "--from-metallb",
                     "--kubeconfig", str(kubeconfig)])


def on(bed: L2Bed, name: str, device: str) -> bool:
    return VIP in sh("ip", "-4", "addr", "show", "dev", device, ns=bed.ns[name])


def advert(emu: KubeEmulator, rack: str, interfaces: list[str]) -> None:
    spec: dict[str, Any] = {"ipAddressPools": ["lan"], "interfaces": interfaces,
                            "nodeSelectors": [{"matchLabels": {"rack": rack}}]}
    emu.put("l2advertisements", mlb("L2Advertisement", "lan", spec), group="metallb.io")


async def test_l2_advertisements_pick_the_host_and_the_interface(
        bed: tuple[L2Bed, KubeEmulator]) -> None:
    l2, emu = bed
    for kind, version, plural in (("IPAddressPool", "v1beta1", "ipaddresspools"),
                                  ("L2Advertisement", "v1beta1", "l2advertisements")):
        emu.put("customresourcedefinitions", crd(kind, version, plural))
    for i, name in enumerate(ENGINES):
        emu.put("nodes", {"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": name, "labels": {"rack": "ab"[i]}}})
    emu.put("ipaddresspools", mlb("IPAddressPool", "lan", {"addresses": [f"{VIP}/32"]}),
            group="metallb.io")
    advert(emu, "b", ["e0"])  # eng2's Node only
    for name in ENGINES:
        start(l2, name)
    await eventually(lambda: on(l2, "eng2", "e0"), within=20)
    await eventually(lambda: l2.ask() == "eng2", within=10)
    assert not on(l2, "eng1", "e0")

    advert(emu, "b", ["e1"])  # the other interface
    await eventually(lambda: on(l2, "eng2", "e1") and not on(l2, "eng2", "e0"), within=10)
    assert not on(l2, "eng1", "e1")

    advert(emu, "a", ["e1"])  # eng1's Node instead
    await eventually(lambda: on(l2, "eng1", "e1") and not on(l2, "eng2", "e1"), within=10)
    logs = "".join(p.read_text() for p in l2.dir.glob("eng*.log"))
    assert "Traceback" not in logs, logs
