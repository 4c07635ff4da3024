"""The echo workload over real loopback sockets: HTTP/1.1, h2c, TCP and UDP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest

from podway.tools.echo import Identity
from podway.tools.echo.server import EchoOptions, serve
from tests.e2e.harness import free_port, free_port_both


@pytest.fixture
async def echo_port(request: pytest.FixtureRequest) -> AsyncIterator[int]:
    mode = getattr(request, "param", "http")
    port = free_port_both() if "udp" in mode else free_port()
    started = asyncio.Event()
    opts = EchoOptions(port=port, tcp="tcp" in mode, udp="udp" in mode,
                       identity=Identity(name="e1", pod="e1-pod", namespace="ns", node="n1"))
    task = asyncio.create_task(serve(opts, started=started))
    await started.wait()
    try:
        yield port
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_http1_keepalive_answers_json_describing_the_request(echo_port: int) -> None:
    """Two requests on one connection get JSON with identity, method, path, headers, client."""
    async with httpx.AsyncClient(trust_env=False) as client:
        first = await client.get(f"http://127.0.0.1:{echo_port}/a?b=1", headers={"X-T": "v"})
        second = await client.post(f"http://127.0.0.1:{echo_port}/post", content=b"x" * 1000)
    body = first.json()
    assert (body["name"], body["pod"], body["namespace"], body["node"]) == (
        "e1", "e1-pod", "ns", "n1")
    assert (body["method"], body["path"], body["protocol"]) == ("GET", "/a?b=1", "HTTP/1.1")
    assert body["headers"]["x-t"] == "v"
    assert body["client"].startswith("127.0.0.1:")
    assert second.json()["method"] == "POST"
    assert second.json()["client"] == body["client"]  # same connection: keep-alive worked


async def test_chunked_body_and_status_path(echo_port: int) -> None:
    """A chunked request body is consumed; /status/NNN answers NNN; /healthz answers ok."""
    async def chunks() -> AsyncIterator[bytes]:
        yield b"abc"
        yield b"def"

    async with httpx.AsyncClient(trust_env=False) as client:
        posted = await client.post(f"http://127.0.0.1:{echo_port}/c", content=chunks())
        status = await client.get(f"http://127.0.0.1:{echo_port}/status/418")
        ready = await client.get(f"http://127.0.0.1:{echo_port}/healthz")
    assert posted.json()["headers"]["transfer-encoding"] == "chunked"
    assert status.status_code == 418
    assert (ready.status_code, ready.text) == (200, "ok\n")


async def test_h2c_prior_knowledge(echo_port: int) -> None:
    """HTTP/2 without TLS (prior knowledge) is answered over HTTP/2."""
    async with httpx.AsyncClient(http1=False, http2=True, trust_env=False) as client:
        reply = await client.get(f"http://127.0.0.1:{echo_port}/h2", headers={"X-T": "2"})
    assert reply.http_version == "HTTP/2"
    assert (reply.json()["protocol"], reply.json()["headers"]["x-t"]) == ("HTTP/2", "2")


@pytest.mark.parametrize("http2", [False, True])
async def test_delay_path_answers_late_and_in_order(echo_port: int, http2: bool) -> None:
    """/delay/MS answers after MS ms (HTTP/1.1 and h2c); the next request still gets its answer."""
    loop = asyncio.get_running_loop()
    async with httpx.AsyncClient(http1=not http2, http2=http2, trust_env=False) as client:
        began = loop.time()
        slow = await client.get(f"http://127.0.0.1:{echo_port}/delay/300")
        waited = loop.time() - began
        after = await client.get(f"http://127.0.0.1:{echo_port}/next")
    assert (slow.status_code, slow.json()["path"]) == (200, "/delay/300")
    assert 0.29 <= waited < 5
    assert after.json()["path"] == "/next"


@pytest.mark.parametrize("echo_port", ["tcp+udp"], indirect=True)
async def test_tcp_and_udp_echo_and_whoami(echo_port: int) -> None:
    """TCP and UDP echo bytes unchanged; ``whoami`` answers the identity JSON."""
    reader, writer = await asyncio.open_connection("127.0.0.1", echo_port)
    writer.write(b"ping\n")
    assert await reader.readline() == b"ping\n"
    writer.write(b"whoami\n")
    assert json.loads(await reader.readline())["name"] == "e1"
    writer.close()
    loop = asyncio.get_running_loop()
    replies: asyncio.Queue[bytes] = asyncio.Queue()

    class Client(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: object) -> None:
            replies.put_nowait(data)

    transport, _ = await loop.create_datagram_endpoint(Client,
                                                       remote_addr=("127.0.0.1", echo_port))
    try:
        transport.sendto(b"dgram")
        assert await asyncio.wait_for(replies.get(), 2) == b"dgram"
        transport.sendto(b"whoami")
        assert json.loads(await asyncio.wait_for(replies.get(), 2))["name"] == "e1"
    finally:
        transport.close()


async def test_healthz_toggle_fails_and_restores_only_the_health_endpoint(echo_port: int) -> None:
    """POST /healthz/fail makes /healthz answer 503 (other paths still 200) until /healthz/ok;
    over HTTP/1.1 and h2c alike (one state per server)."""
    base = f"http://127.0.0.1:{echo_port}"
    async with httpx.AsyncClient(trust_env=False) as client:
        await client.post(f"{base}/healthz/fail")
        failing = await client.get(f"{base}/healthz")
        other = await client.get(f"{base}/anything")
    async with httpx.AsyncClient(trust_env=False, http1=False, http2=True) as h2:
        failing_h2 = await h2.get(f"{base}/healthz")
        await h2.post(f"{base}/healthz/ok")
    async with httpx.AsyncClient(trust_env=False) as client:
        restored = await client.get(f"{base}/healthz")
    assert (failing.status_code, other.status_code) == (503, 200)
    assert failing_h2.status_code == 503
    assert failing_h2.http_version == "HTTP/2"
    assert restored.status_code == 200
