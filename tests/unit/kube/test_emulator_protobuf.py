"""Create and update bodies in Kubernetes' protobuf encoding (client-go's typed clients send it;
Helm stores its releases that way): decoded for Secrets and ConfigMaps, refused with 415 for
any other kind or a malformed body. The bodies are built here field by field from the wire
format (envelope ``k8s\\0`` + ``runtime.Unknown``), independent of the decoder."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import aiohttp
import pytest

from podway.kube.emulator import KubeEmulator
from podway.kube.emulator.protobuf import ProtobufError, decode

PROTO = "application/vnd.kubernetes.protobuf"


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, value: bytes | str | int) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    raw = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(raw)) + raw


def entry(number: int, key: str, value: bytes | str) -> bytes:
    return field(number, field(1, key) + field(2, value))


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    return b"k8s\x00" + field(1, field(1, api_version) + field(2, kind)) + field(2, raw) \
        + field(4, PROTO)


def helm_release_secret(version: int, payload: bytes) -> bytes:
    meta = (field(1, f"sh.helm.release.v1.podway.v{version}") + field(3, "podway")
            + field(6, "41") + field(7, 3)
            # creationTimestamp (seconds 1): the server's, skipped
            + field(8, field(1, 1_700_000_000))
            + entry(11, "owner", "helm") + entry(11, "version", str(version))
            + entry(12, "note", "kept") + field(14, "example.com/keep"))
    return envelope("v1", "Secret", field(1, meta) + entry(2, "release", payload)
                    + field(3, "helm.sh/release.v1") + entry(4, "plain", "text")
                    + field(5, 1))


def test_a_secret_decodes_as_its_json_form() -> None:
    payload = bytes(range(256))  # any bytes: data travels base64 in JSON
    assert decode(helm_release_secret(2, payload)) == {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "sh.helm.release.v1.podway.v2", "namespace": "podway",
                     "resourceVersion": "41", "generation": 3,
                     "labels": {"owner": "helm", "version": "2"},
                     "annotations": {"note": "kept"}, "finalizers": ["example.com/keep"]},
        "data": {"release": base64.b64encode(payload).decode()},
        "type": "helm.sh/release.v1", "stringData": {"plain": "text"}, "immutable": True}


def test_a_configmap_decodes_with_text_and_binary_data() -> None:
    body = envelope("v1", "ConfigMap", field(1, field(1, "cm") + field(3, "ns"))
                    + entry(2, "a", "b") + entry(3, "bin", b"\x00\xff") + field(4, 0))
    assert decode(body) == {"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "cm", "namespace": "ns"},
                            "data": {"a": "b"}, "binaryData": {"bin": "AP8="},
                            "immutable": False}


@pytest.mark.parametrize("body", [
    b'{"kind": "Secret"}',  # no envelope
    envelope("v1", "Pod", field(1, field(1, "p"))),  # a kind it does not decode
    b"k8s\x00" + field(1, field(1, "v1") + field(2, "Secret")) + b"\x12\x7f",  # truncated
])
def test_anything_else_is_refused(body: bytes) -> None:
    with pytest.raises(ProtobufError):
        decode(body)


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    async with KubeEmulator() as emulator:
        yield emulator


async def test_the_api_creates_and_updates_from_protobuf_and_refuses_other_kinds(
        emu: KubeEmulator) -> None:
    emu.put("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                           "metadata": {"name": "podway"}})
    base = f"{emu.url}/api/v1/namespaces/podway"
    async with aiohttp.ClientSession(headers={"Content-Type": PROTO}) as http:
        async with http.post(f"{base}/secrets", data=helm_release_secret(1, b"one")) as r:
            assert r.status == 201, await r.text()
        stored = emu.get("secrets", "podway", "sh.helm.release.v1.podway.v1")
        assert stored is not None
        assert stored["data"] == {"release": base64.b64encode(b"one").decode()}
        assert stored["metadata"]["labels"] == {"owner": "helm", "version": "1"}
        update = envelope("v1", "Secret", field(1, field(1, "sh.helm.release.v1.podway.v1")
                                                 + field(3, "podway")
                                                 + entry(11, "status", "superseded"))
                          + entry(2, "release", b"two"))
        async with http.put(f"{base}/secrets/sh.helm.release.v1.podway.v1", data=update) as r:
            assert r.status == 200, await r.text()
        stored = emu.get("secrets", "podway", "sh.helm.release.v1.podway.v1")
        assert stored is not None
        assert stored["metadata"]["labels"] == {"status": "superseded"}
        assert stored["data"] == {"release": base64.b64encode(b"two").decode()}
        pod = envelope("v1", "Pod", field(1, field(1, "p")))
        async with http.post(f"{base}/pods", data=pod) as r:
            assert r.status == 415
            assert "decodes no protobuf v1 Pod" in (await r.json())["message"]
