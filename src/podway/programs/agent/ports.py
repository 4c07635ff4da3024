"""The node's port table: which node port maps to which (pod, pod port, protocol).

Invariants:
- a node port is in the table at most once per protocol, and only if we hold a bound socket on
  it (``SocketOpener``), so no other process can take it and a port some process already uses is
  skipped at allocation time;
- allocation rotates a cursor through the range, so a freed port is the last one reused (a
  stale client or conntrack entry for it is unlikely to reach the next pod).

The table does no kernel-rule work; the controller turns entries into ``Rule`` values.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Protocol

from podway.base.errors import ConfigError
from podway.programs.agent.netns import single_thread
from podway.programs.agent.types import L4, PodKey, Rule

DEFAULT_RANGE = "61000-62000"


class PortRangeError(ConfigError, ValueError):
    """An invalid ``--port-range``."""


@dataclass(frozen=True, slots=True)
class PortRange:
    """An inclusive port range, 1024 < start < end <= 65535."""

    start: int
    end: int

    @classmethod
    def parse(cls, text: str) -> PortRange:
        parts = text.strip().split("-")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            raise PortRangeError(f"port range {text!r} is not of the form START-END (integers)")
        start, end = int(parts[0]), int(parts[1])
        if not 1024 < start < end <= 65535:
            raise PortRangeError(f"port range {text!r}: need 1024 < start < end <= 65535")
        return cls(start, end)

    def __contains__(self, port: object) -> bool:
        return isinstance(port, int) and self.start <= port <= self.end

    def __len__(self) -> int:
        return self.end - self.start + 1


class Reservation(Protocol):
    def close(self) -> None: ...


class SocketOpener(Protocol):
    """Seam: hold a port. Raises ``OSError`` when the port is already in use."""

    def open(self, *, port: int, protocol: L4) -> Reservation: ...


class KernelSocketOpener:
    """Binds real sockets on ``0.0.0.0:port`` (not listening: traffic is DNATed before any local
    delivery). With ``netns``, sockets are made by one dedicated thread that has joined that
    network namespace (Python 3.11 has no ``os.setns``; a thread's netns is its own)."""

    def __init__(self, *, netns: str | None = None) -> None:
        self._pool: ThreadPoolExecutor | None = None
        if netns is not None:
            self._pool = single_thread(netns=netns, name="npl-sockets")

    def open(self, *, port: int, protocol: L4) -> Reservation:
        if self._pool is None:
            return _bind(port, protocol)
        return self._pool.submit(_bind, port, protocol).result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def _bind(port: int, protocol: L4) -> socket.socket:
    kind = socket.SOCK_STREAM if protocol == "tcp" else socket.SOCK_DGRAM
    sock = socket.socket(socket.AF_INET, kind)
    try:
        sock.bind(("0.0.0.0", port))
    except OSError:
        sock.close()
        raise
    return sock


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One allocated mapping, owned by ``pod``."""

    pod: PodKey
    pod_ip: str
    pod_port: int
    protocol: L4
    node_port: int

    @property
    def rule(self) -> Rule:
        return Rule(protocol=self.protocol, node_port=self.node_port, pod_ip=self.pod_ip,
                    pod_port=self.pod_port)


class PortTable:
    """Allocates node ports from a range, per protocol, holding a socket on each."""

    def __init__(self, *, port_range: PortRange, opener: SocketOpener,
                 on_release: Callable[[], None] | None = None) -> None:
        self.range = port_range
        self._opener = opener
        self._on_release = on_release
        self._by_port: dict[tuple[L4, int], tuple[Entry, Reservation]] = {}
        self._by_pod: dict[PodKey, dict[tuple[int, L4], Entry]] = {}
        self._cursor: dict[L4, int] = {"tcp": port_range.start, "udp": port_range.start}
        self._counts: dict[L4, int] = {"tcp": 0, "udp": 0}

    def __len__(self) -> int:
        return len(self._by_port)

    def count(self, protocol: L4) -> int:
        """Entries of ``protocol`` (O(1): the gauges read it after every reconcile)."""
        return self._counts[protocol]

    def __iter__(self) -> Iterator[Entry]:
        return iter([entry for entry, _ in self._by_port.values()])

    def entries(self, pod: PodKey) -> list[Entry]:
        return sorted(self._by_pod.get(pod, {}).values(), key=lambda e: (e.protocol, e.pod_port))

    def get(self, *, pod: PodKey, pod_port: int, protocol: L4) -> Entry | None:
        return self._by_pod.get(pod, {}).get((pod_port, protocol))

    def owner(self, *, protocol: L4, node_port: int) -> Entry | None:
        held = self._by_port.get((protocol, node_port))
        return held[0] if held else None

    def allocate(self, *, pod: PodKey, pod_ip: str, pod_port: int, protocol: L4) -> Entry | None:
        """A new entry on the next free port after the cursor, or None when none is free."""
        start = self._cursor[protocol]
        size = len(self.range)
        for step in range(size):
            port = self.range.start + (start - self.range.start + step) % size
            if (protocol, port) in self._by_port:
                continue
            try:
                held = self._opener.open(port=port, protocol=protocol)
            except OSError as exc:
                if exc.errno not in (errno.EADDRINUSE, errno.EACCES, None):
                    raise
                continue
            self._cursor[protocol] = port + 1 if port < self.range.end else self.range.start
            entry = Entry(pod=pod, pod_ip=pod_ip, pod_port=pod_port, protocol=protocol,
                          node_port=port)
            self._store(entry, held)
            return entry
        return None

    def restore(self, entry: Entry) -> bool:
        """Take a specific port back (restart from annotations). False if it cannot be held."""
        if entry.node_port not in self.range or (entry.protocol, entry.node_port) in self._by_port:
            return False
        if self.get(pod=entry.pod, pod_port=entry.pod_port, protocol=entry.protocol):
            return False
        try:
            held = self._opener.open(port=entry.node_port, protocol=entry.protocol)
        except OSError:
            return False
        self._store(entry, held)
        return True

    def set_ip(self, entry: Entry, pod_ip: str) -> Entry:
        """The same port, now pointing at the pod's new IP."""
        new = replace(entry, pod_ip=pod_ip)
        _, held = self._by_port[(entry.protocol, entry.node_port)]
        self._store(new, held)
        return new

    def release(self, entry: Entry) -> None:
        held = self._by_port.pop((entry.protocol, entry.node_port), None)
        if held is None:
            return
        held[1].close()
        self._counts[entry.protocol] -= 1
        mine = self._by_pod.get(entry.pod, {})
        mine.pop((entry.pod_port, entry.protocol), None)
        if not mine:
            self._by_pod.pop(entry.pod, None)
        if self._on_release is not None:
            self._on_release()

    def release_all(self) -> None:
        for entry in list(self):
            self.release(entry)

    def _store(self, entry: Entry, held: Reservation) -> None:
        if (entry.protocol, entry.node_port) not in self._by_port:
            self._counts[entry.protocol] += 1
        self._by_port[(entry.protocol, entry.node_port)] = (entry, held)
        self._by_pod.setdefault(entry.pod, {})[(entry.pod_port, entry.protocol)] = entry
