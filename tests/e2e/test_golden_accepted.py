"""Every golden xDS case is valid Envoy config: a real Envoy ACKs every type and NACKs none.

The golden IR is made local first — listeners on free loopback ports, members on a closed
loopback port, real certificates for the placeholders — so nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
import trustme

from podway.envoy import types
from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.protocol import Ack, Event, Nack
from podway.ir.load import from_yaml

from .harness import free_port, free_port_both, private_engine

pytestmark = pytest.mark.e2e
GOLDEN = Path(__file__).parents[1] / "golden" / "xds"
CASES = sorted(p for p in GOLDEN.iterdir() if (p / "ir.yaml").exists())


def localize(text: str) -> str:
    """Golden IR YAML → the same config bound to loopback only, with real certificates."""
    ca = trustme.CA()
    for placeholder in sorted(set(re.findall(r"\b([A-Z]+)-CERT\b", text))):
        cert = ca.issue_cert(f"{placeholder.lower()}.example.com")
        chain = cert.cert_chain_pems[0].bytes().decode()
        key = cert.private_key_pem.bytes().decode()
        text = text.replace(f"{placeholder}-CERT", _literal(chain))
        text = text.replace(f"{placeholder}-KEY", _literal(key))
    text = text.replace("CA-PEM", _literal(ca.cert_pem.bytes().decode()))
    closed = free_port()
    text = re.sub(r"\b10\.0\.0\.\d+", "127.0.0.1", text)
    text = re.sub(r"(address: 127\.0\.0\.1, port: )\d+", rf"\g<1>{closed}", text)
    ports: dict[str, int] = {}
    return re.sub(r"(?m)^(  port: )(\d+)$",
                  lambda m: m.group(1) + str(ports.setdefault(m.group(2), free_port_both())),
                  text)


def _literal(pem: str) -> str:
    return '"' + pem.replace("\n", "\\n") + '"'


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_envoy_accepts_the_golden_config(case: Path) -> None:
    """Envoy ACKs listeners, routes, clusters, endpoints and secrets of the case; no NACK."""
    ir = from_yaml(localize((case / "ir.yaml").read_text(encoding="utf-8")))
    resources = Builder().build(ir)
    expected = {t for t in types.PUSH_ORDER if resources[t]}
    acked: set[str] = set()
    nacks: list[Nack] = []
    done = asyncio.Event()

    def on_event(event: Event) -> None:
        if isinstance(event, Nack):
            nacks.append(event)
            done.set()
        elif isinstance(event, Ack):
            acked.add(event.type_url)
            if expected <= acked:
                done.set()

    cache = Cache()
    cache.set(resources)
    async with private_engine(cache, node_id=case.name, on_event=on_event):
        await asyncio.wait_for(done.wait(), 20)
    assert [n.message for n in nacks] == []
    assert expected <= acked
