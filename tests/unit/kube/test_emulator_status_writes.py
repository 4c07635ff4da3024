"""The emulator's share of a large status pass (bench/statuses.py): each status write encoded
once for its answer and every watch, a burst of events sent in one write, a status write
validating and comparing only the status, and no stored version changed in place."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from podway.kube.emulator import KubeEmulator, store
from tests.waiting import eventually

GW = "gateway.networking.k8s.io"
MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator() as emulator:
        emulator.install_gateway_api()
        yield emulator


def route(name: str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"parentRefs": [{"name": "edge"}], "hostnames": [f"{name}.test"], **extra}}


def status(text: str) -> dict[str, Any]:
    return {"status": {"parents": [{
        "parentRef": {"name": "edge"}, "controllerName": "podway.io/gateway-controller",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                        "message": text, "lastTransitionTime": "2026-12-05T12:00:00Z"}]}]}}


async def watch_lines(http: aiohttp.ClientSession, url: str, n: int,
                      started: asyncio.Event) -> tuple[list[bytes], int]:
    """The first ``n`` event lines of a watch, and the HTTP chunks they came in."""
    lines: list[bytes] = []
    chunks = 0
    pending = b""
    async with http.get(url) as resp:
        started.set()
        async for data, end_of_chunk in resp.content.iter_chunks():
            chunks += end_of_chunk
            pending += data
            *done, pending = pending.split(b"\n")
            lines += done
            if len(lines) >= n:
                return lines, chunks
    return lines, chunks


async def test_a_status_write_is_encoded_once_for_its_answer_and_every_watch(
        emu: KubeEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two watches and the PATCH's answer carry the same bytes, from one encoding."""
    emu.put("httproutes", route("r"), group=GW)
    base = f"{emu.url}/apis/{GW}/v1/namespaces/default/httproutes"
    encoded: list[str] = []
    dumps = json.dumps

    def counting(obj: Any, **kw: Any) -> str:
        if isinstance(obj, dict) and (obj.get("metadata") or {}).get("name") == "r":
            encoded.append(obj["status"]["parents"][0]["conditions"][0]["message"])
        return dumps(obj, **kw)

    monkeypatch.setattr(store.json, "dumps", counting)
    async with aiohttp.ClientSession() as http:
        url = f"{base}?watch=1&resourceVersion={emu.version}"
        ready = [asyncio.Event(), asyncio.Event()]
        watches = [asyncio.create_task(watch_lines(http, url, 1, r)) for r in ready]
        for r in ready:
            await r.wait()
        await eventually(lambda: emu.watching("httproutes", group=GW) == 2)
        async with http.patch(f"{base}/r/status", json=status("one"), headers=MERGE) as resp:
            assert resp.status == 200
            answer = await resp.read()
        heard = [lines[0] for lines, _ in await asyncio.gather(*watches)]
    assert encoded == ["one"]
    assert json.loads(answer)["status"] == status("one")["status"]
    for line in heard:
        assert line == b'{"type": "MODIFIED", "object": ' + answer + b"}"


async def test_a_burst_of_events_goes_out_in_one_write(emu: KubeEmulator) -> None:
    """Events already waiting when a watch writes go out together, in order."""
    base = f"{emu.url}/apis/{GW}/v1/namespaces/default/httproutes"
    async with aiohttp.ClientSession() as http:
        started = asyncio.Event()
        task = asyncio.create_task(watch_lines(
            http, f"{base}?watch=1&resourceVersion={emu.version}", 50, started))
        await started.wait()
        await eventually(lambda: emu.watching("httproutes", group=GW) == 1)
        for i in range(50):  # one loop turn: the watch wakes once for all of them
            emu.put("httproutes", route(f"r{i}"), group=GW)
        lines, chunks = await asyncio.wait_for(task, 10)
    assert [json.loads(line)["object"]["metadata"]["name"] for line in lines] == \
        [f"r{i}" for i in range(50)]
    assert chunks <= 2


async def test_a_status_write_warns_only_of_the_status_it_writes(emu: KubeEmulator) -> None:
    """An unknown spec field (kept, warned when written) is not warned again by each status
    write, which does not take the spec; an unknown status field is."""
    base = f"{emu.url}/api/v1/namespaces/default/services"
    lb = {"status": {"loadBalancer": {"ingress": [{"ip": "198.18.0.1"}]}}}
    async with aiohttp.ClientSession() as http:
        async with http.post(base, json={"metadata": {"name": "s"},
                                         "spec": {"ports": [{"port": 80}], "bogus": 1}}) as resp:
            assert resp.status == 201
            assert "spec.bogus" in resp.headers.get("Warning", "")
        async with http.patch(f"{base}/s/status", json=lb, headers=MERGE) as resp:
            assert resp.status == 200
            assert "Warning" not in resp.headers
        odd = {"status": {**lb["status"], "oddity": 1}}
        async with http.patch(f"{base}/s/status", json=odd, headers=MERGE) as resp:
            assert resp.status == 200
            assert 'unknown field \\"status.oddity\\"' in resp.headers.get("Warning", "")


async def test_a_patch_never_changes_the_stored_version_it_was_applied_to(
        emu: KubeEmulator) -> None:
    """Copy-on-write: the version a patch replaced is as it was, defaults and version too."""
    emu.put("deployments", {"metadata": {"name": "d", "namespace": "default"},
                            "spec": {"template": {}}}, group="apps")
    stored = emu._store.get(emu._store.by_plural("deployments", "apps"), "default", "d")
    before = json.dumps(stored)
    async with aiohttp.ClientSession() as http, \
            http.patch(f"{emu.url}/apis/apps/v1/namespaces/default/deployments/d",
                       json={"metadata": {"labels": {"a": "1"}}}, headers=MERGE) as resp:
        assert resp.status == 200
        answer = await resp.json()
    assert answer["spec"]["replicas"] == 1  # defaulted, in the new version
    assert answer["metadata"]["labels"] == {"a": "1"}
    assert json.dumps(stored) == before
