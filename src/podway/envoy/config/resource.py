"""``Resource``: one named xDS resource as the builder makes it and the cache and server send it —
the serialized message, a digest for versions, and the ``Any`` it packs into (built once, on
first use). ``Resources``: type URL → name → resource.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from google.protobuf import any_pb2
from google.protobuf.message import Message


@dataclass(frozen=True, slots=True)
class Resource:
    """One built resource: the packed ``Any`` sent to Envoy, a content digest, and its message
    (parsed from the bytes on first use, then kept). A deferred resource (``deferred``) is
    encoded on first use of ``packed``; its digest is known before."""

    name: str
    digest: str
    # May hold a private key: never in reprs or logs. None: parse ``packed`` when asked.
    built: Message | None = field(default=None, repr=False, compare=False)
    kind: type[Message] | None = field(default=None, repr=False, compare=False)
    # The packed ``Any``; None until ``make`` (which encodes it) is first called. ``make``
    # is kept: a reader that saw ``held`` unset while another thread set it still calls it
    # (the same bytes again), never a cleared one.
    held: any_pb2.Any | None = field(default=None, repr=False, compare=False)
    make: Callable[[], bytes] | None = field(default=None, repr=False, compare=False)

    @property
    def packed(self) -> any_pb2.Any:
        held = self.held  # (read once: another thread may set it meanwhile)
        if held is None:
            assert self.make is not None
            assert self.kind is not None
            held = _any(self.kind, self.make())
            object.__setattr__(self, "held", held)
        return held

    @property
    def message(self) -> Message:
        if self.built is None:
            assert self.kind is not None
            object.__setattr__(self, "built", self.kind.FromString(self.packed.value))
        assert self.built is not None
        return self.built

    @classmethod
    def of(cls, name: str, message: Message, *, tag: str = "") -> Resource:
        """``message`` encoded; the message itself is not kept (``message`` parses the bytes
        again when asked: few are read, and keeping every one doubled the builder's memory,
        ~58 MiB at 10,000 pools). ``tag`` is appended to the digest (a function of the
        content too: ``podway.envoy.config.endpoints.assignment_resource``)."""
        data = message.SerializeToString(deterministic=True)
        return cls._packed(name, type(message), data, tag)

    @classmethod
    def of_bytes(cls, name: str, kind: type[Message], data: bytes) -> Resource:
        """A resource already encoded (deterministically) as ``kind``."""
        return cls._packed(name, kind, data)

    @classmethod
    def deferred(cls, name: str, kind: type[Message], make: Callable[[], bytes],
                 digest: str) -> Resource:
        """A resource encoded as ``kind`` by ``make`` when first sent or read; ``digest``
        must change whenever what ``make`` returns does (and be stable across processes)."""
        return cls(name, digest, None, kind, None, make)

    @classmethod
    def _packed(cls, name: str, kind: type[Message], data: bytes, tag: str = "") -> Resource:
        return cls(name, hashlib.blake2b(data, digest_size=12).hexdigest() + tag, None, kind,
                   _any(kind, data))


def _any(kind: type[Message], data: bytes) -> any_pb2.Any:
    return any_pb2.Any(type_url="type.googleapis.com/" + kind.DESCRIPTOR.full_name, value=data)


Resources = Mapping[str, Mapping[str, Resource]]  # type URL → name → resource
