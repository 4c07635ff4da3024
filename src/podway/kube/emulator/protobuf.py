"""Request bodies in Kubernetes' protobuf encoding, for the few kinds clients send that way.

client-go's typed clients for built-in kinds may send ``application/vnd.kubernetes.protobuf``
(Helm's release storage does: its Secrets, or ConfigMaps with ``HELM_DRIVER=configmap``). The
emulator answers in JSON, which those clients accept; it decodes such a body into the JSON
object the same client would have sent:

- the envelope: the 4 bytes ``k8s\\0``, then a ``runtime.Unknown`` message (``typeMeta`` 1 with
  ``apiVersion`` 1 and ``kind`` 2, ``raw`` 2: the object's own message);
- ``ObjectMeta`` (name 1, generateName 2, namespace 3, uid 5, resourceVersion 6, generation 7,
  labels 11, annotations 12, finalizers 14); ``creationTimestamp`` and ``managedFields`` are
  the server's and skipped, as every other field;
- Secret: metadata 1, data 2 (bytes, given back base64 as JSON carries them), type 3,
  stringData 4, immutable 5; ConfigMap: metadata 1, data 2, binaryData 3, immutable 4.

Any other kind is refused (``ProtobufError``: the server answers 415, as an API server does for
a type it cannot decode). No I/O."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any

Obj = dict[str, Any]
MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"


class ProtobufError(ValueError):
    """A body that is not a protobuf object of a kind the emulator decodes."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of one message: varints as int, length-delimited as bytes; the
    fixed-width types are skipped (no field read here has them)."""
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ProtobufError("truncated field")
            yield number, data[pos:pos + size]
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise ProtobufError("a string field holds a number")
    return value.decode()


def _entry(value: int | bytes) -> tuple[str, bytes]:
    """A map entry (key 1, value 2)."""
    if not isinstance(value, bytes):
        raise ProtobufError("a map entry holds a number")
    found: dict[int, int | bytes] = dict(fields(value))
    raw = found.get(2, b"")
    return _text(found.get(1, b"")), raw if isinstance(raw, bytes) else b""


def _meta(data: bytes) -> Obj:
    out: Obj = {}
    names = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}
    for number, value in fields(data):
        if number in names:
            out[names[number]] = _text(value)
        elif number == 7 and isinstance(value, int):
            out["generation"] = value
        elif number in (11, 12):
            key, raw = _entry(value)
            out.setdefault("labels" if number == 11 else "annotations", {})[key] = raw.decode()
        elif number == 14:
            out.setdefault("finalizers", []).append(_text(value))
    return out


def _secret(data: bytes) -> Obj:
    out: Obj = {"metadata": {}}
    for number, value in fields(data):
        if number == 1 and isinstance(value, bytes):
            out["metadata"] = _meta(value)
        elif number in (2, 4):
            key, raw = _entry(value)
            if number == 2:
                out.setdefault("data", {})[key] = base64.b64encode(raw).decode()
            else:
                out.setdefault("stringData", {})[key] = raw.decode()
        elif number == 3:
            out["type"] = _text(value)
        elif number == 5:
            out["immutable"] = bool(value)
    return out


def _configmap(data: bytes) -> Obj:
    out: Obj = {"metadata": {}}
    for number, value in fields(data):
        if number == 1 and isinstance(value, bytes):
            out["metadata"] = _meta(value)
        elif number in (2, 3):
            key, raw = _entry(value)
            if number == 2:
                out.setdefault("data", {})[key] = raw.decode()
            else:
                out.setdefault("binaryData", {})[key] = base64.b64encode(raw).decode()
        elif number == 4:
            out["immutable"] = bool(value)
    return out


KINDS: dict[tuple[str, str], Callable[[bytes], Obj]] = {
    ("v1", "Secret"): _secret, ("v1", "ConfigMap"): _configmap}


def decode(body: bytes) -> Obj:
    """The JSON object of a protobuf request body; ``ProtobufError`` for anything else."""
    if not body.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf body (no k8s\\0 prefix)")
    envelope: dict[int, int | bytes] = dict(fields(body[len(MAGIC):]))
    type_meta = envelope.get(1, b"")
    raw = envelope.get(2, b"")
    if not isinstance(type_meta, bytes) or not isinstance(raw, bytes):
        raise ProtobufError("malformed envelope")
    names: dict[int, int | bytes] = dict(fields(type_meta))
    api_version, kind = _text(names.get(1, b"")), _text(names.get(2, b""))
    decoder = KINDS.get((api_version, kind))
    if decoder is None:
        raise ProtobufError(f"the emulator decodes no protobuf {api_version} {kind}")
    return {"apiVersion": api_version, "kind": kind, **decoder(raw)}
