"""Who binds each address:port: one listener per address, port and transport family.

First come, first served, in the order the translator offers listeners: the shared Ingress
listeners, then Gateway listeners (oldest Gateway first), then Services (oldest first). A
wildcard address (``0.0.0.0``, ``::``) overlaps every specific address on the same port; TCP
and UDP never clash. A refusal is a decision (``Refusal``) the caller turns into a problem or,
for a Gateway, into its listeners' ``PortUnavailable`` status — never text to be parsed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from podway.ir import Listener, ListenerProtocol


def family(protocol: ListenerProtocol) -> str:
    """The transport a listener binds: ``udp`` or ``tcp`` (HTTP, HTTPS, TLS ride on TCP)."""
    return "udp" if protocol is ListenerProtocol.UDP else "tcp"


def wildcard(address: str) -> bool:
    return address in ("0.0.0.0", "::")


@dataclass(frozen=True, slots=True)
class Refusal:
    """A listener that cannot bind because ``holder`` (an IR listener name) came first."""

    address: str
    port: int
    family: str
    holder: str

    @property
    def message(self) -> str:
        return f"{self.address}:{self.port}/{self.family} is already used by {self.holder}"


@dataclass(slots=True)
class PortTable:
    """The ports given out so far."""

    _taken: dict[tuple[int, str], list[tuple[str, str]]] = field(default_factory=dict)

    def take(self, *, name: str, address: str, port: int,
             protocol: ListenerProtocol) -> Refusal | None:
        """Give ``address:port`` to listener ``name``, or say who holds it already."""
        fam = family(protocol)
        held = self._taken.setdefault((port, fam), [])
        for addr, holder in held:
            if addr == address or wildcard(addr) or wildcard(address):
                return Refusal(address, port, fam, holder)
        held.append((address, name))
        return None

    def take_listener(self, listener: Listener) -> Refusal | None:
        return self.take(name=listener.name, address=listener.address, port=listener.port,
                         protocol=listener.protocol)
