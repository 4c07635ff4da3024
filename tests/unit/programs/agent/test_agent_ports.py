"""Port table: range validation, rotating allocation, socket reservation, restore."""

from __future__ import annotations

import errno
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podway.programs.agent.ports import (
    Entry,
    KernelSocketOpener,
    PortRange,
    PortRangeError,
    PortTable,
)
from podway.programs.agent.types import L4, PodKey


class FakeHeld:
    def __init__(self, opener: FakeOpener, key: tuple[L4, int]) -> None:
        self.opener, self.key = opener, key

    def close(self) -> None:
        self.opener.held.remove(self.key)


class FakeOpener:
    """Fake socket opener: ``busy`` ports belong to another process."""

    def __init__(self, busy: set[tuple[L4, int]] | None = None) -> None:
        self.busy = busy or set()
        self.held: set[tuple[L4, int]] = set()

    def open(self, *, port: int, protocol: L4) -> FakeHeld:
        key = (protocol, port)
        if key in self.busy or key in self.held:
            raise OSError(errno.EADDRINUSE, "in use")
        self.held.add(key)
        return FakeHeld(self, key)


P = PodKey("ns/p")


@pytest.mark.parametrize("text", ["61000-62000", " 1025-65535 ", "2000-2001"])
def test_range_accepts_valid(text: str) -> None:
    """Valid ranges parse to their inclusive bounds."""
    parsed = PortRange.parse(text)
    assert (parsed.start, parsed.end) == tuple(int(x) for x in text.strip().split("-"))


@pytest.mark.parametrize("text", ["1024-2000", "2000-2000", "3000-2000", "61000-65536", "a-b",
                                  "61000", "61000-62000-63000", "-1-5", ""])
def test_range_rejects_invalid(text: str) -> None:
    """Ranges outside 1024 < start < end <= 65535, or not integers, are refused."""
    with pytest.raises(PortRangeError):
        PortRange.parse(text)


def test_allocation_rotates_and_is_per_protocol() -> None:
    """Ports come in order from a rotating cursor; TCP and UDP are independent."""
    table = PortTable(port_range=PortRange(61000, 61002), opener=FakeOpener())
    got = [table.allocate(pod=P, pod_ip="198.18.1.2", pod_port=p, protocol="tcp")
           for p in (80, 81)]
    assert [e.node_port for e in got if e] == [61000, 61001]
    udp = table.allocate(pod=P, pod_ip="198.18.1.2", pod_port=53, protocol="udp")
    assert udp is not None
    assert udp.node_port == 61000
    first = got[0]
    assert first is not None
    table.release(first)
    # The freed port is not the next one handed out: the cursor moves on, then wraps.
    nxt = table.allocate(pod=P, pod_ip="198.18.1.2", pod_port=82, protocol="tcp")
    assert nxt is not None
    assert nxt.node_port == 61002
    wrapped = table.allocate(pod=P, pod_ip="198.18.1.2", pod_port=83, protocol="tcp")
    assert wrapped is not None
    assert wrapped.node_port == 61000


def test_busy_port_is_skipped_and_exhaustion_returns_none() -> None:
    """A port held by another process is skipped; a full range yields None."""
    opener = FakeOpener(busy={("tcp", 61000)})
    table = PortTable(port_range=PortRange(61000, 61001), opener=opener)
    entry = table.allocate(pod=P, pod_ip="198.18.1.2", pod_port=80, protocol="tcp")
    assert entry is not None
    assert entry.node_port == 61001
    assert table.allocate(pod=P, pod_ip="198.18.1.2", pod_port=81, protocol="tcp") is None
    assert opener.held == {("tcp", 61001)}


def test_release_closes_socket_and_notifies() -> None:
    """Releasing an entry closes its reservation and calls the on_release hook."""
    opener = FakeOpener()
    freed: list[int] = []
    table = PortTable(port_range=PortRange(61000, 61001), opener=opener,
                      on_release=lambda: freed.append(1))
    entry = table.allocate(pod=P, pod_ip="198.18.1.2", pod_port=80, protocol="tcp")
    assert entry is not None
    table.release(entry)
    assert opener.held == set()
    assert freed == [1]
    assert table.entries(P) == []
    assert len(table) == 0


def test_restore_takes_exact_port_or_refuses() -> None:
    """Restore keeps an annotated port; out-of-range, taken or busy ports are refused."""
    opener = FakeOpener(busy={("tcp", 61003)})
    table = PortTable(port_range=PortRange(61000, 61005), opener=opener)

    def entry(pod: str, port: int, node_port: int) -> Entry:
        return Entry(pod=PodKey(pod), pod_ip="198.18.1.2", pod_port=port, protocol="tcp",
                     node_port=node_port)

    assert table.restore(entry("ns/a", 80, 61004))
    assert table.owner(protocol="tcp", node_port=61004) == entry("ns/a", 80, 61004)
    assert not table.restore(entry("ns/b", 80, 61004))  # taken
    assert not table.restore(entry("ns/b", 80, 60000))  # out of range
    assert not table.restore(entry("ns/b", 80, 61003))  # another process has it
    assert not table.restore(entry("ns/a", 80, 61005))  # ns/a already has 80/tcp


def test_set_ip_keeps_port_and_reservation() -> None:
    """A pod IP change keeps the node port and its socket."""
    opener = FakeOpener()
    table = PortTable(port_range=PortRange(61000, 61001), opener=opener)
    entry = table.allocate(pod=P, pod_ip="198.18.1.2", pod_port=80, protocol="tcp")
    assert entry is not None
    moved = table.set_ip(entry, "198.18.1.9")
    assert moved.node_port == entry.node_port
    assert moved.pod_ip == "198.18.1.9"
    assert table.entries(P) == [moved]
    assert opener.held == {("tcp", entry.node_port)}


@pytest.mark.parametrize("protocol", ["tcp", "udp"])
def test_kernel_opener_refuses_a_port_in_use(protocol: L4) -> None:
    """The real opener raises EADDRINUSE on a port another socket holds."""
    kind = socket.SOCK_STREAM if protocol == "tcp" else socket.SOCK_DGRAM
    with socket.socket(socket.AF_INET, kind) as other:
        other.bind(("0.0.0.0", 0))
        port = other.getsockname()[1]
        with pytest.raises(OSError, match="in use") as info:
            KernelSocketOpener().open(port=port, protocol=protocol)
        assert info.value.errno == errno.EADDRINUSE


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 7), st.sampled_from(["tcp", "udp"])),
                max_size=60))
def test_table_invariants_under_any_sequence(ops: list[tuple[bool, int, L4]]) -> None:
    """Any allocate/release sequence keeps ports unique per protocol, in range, and held."""
    opener = FakeOpener()
    table = PortTable(port_range=PortRange(61000, 61004), opener=opener)
    for allocate, pod_port, protocol in ops:
        if allocate:
            if table.get(pod=P, pod_port=pod_port, protocol=protocol) is None:
                table.allocate(pod=P, pod_ip="198.18.1.2", pod_port=pod_port, protocol=protocol)
        else:
            found = table.get(pod=P, pod_port=pod_port, protocol=protocol)
            if found is not None:
                table.release(found)
        keys = [(e.protocol, e.node_port) for e in table]
        assert len(keys) == len(set(keys))
        assert set(keys) == opener.held
        assert all(61000 <= port <= 61004 for _, port in keys)
        assert table.count("tcp") + table.count("udp") == len(keys)
        assert table.count("udp") == sum(1 for proto, _ in keys if proto == "udp")
        assert sorted(table.entries(P), key=lambda e: (e.protocol, e.pod_port)) == sorted(
            table, key=lambda e: (e.protocol, e.pod_port))
