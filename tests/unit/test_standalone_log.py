"""`podway run` says where it serves: each listener's address at start and on every change."""

from __future__ import annotations

from podway.ir import IR, Listener
from podway.ir import ListenerProtocol as Protocol
from podway.programs.standalone import listener_changes


def listener(name: str, address: str, port: int) -> Listener:
    return Listener(name=name, address=address, port=port, protocol=Protocol.HTTP)


def test_start_lists_every_listener_with_its_address() -> None:
    """At start every listener is named with protocol, address and port (IPv6 bracketed)."""
    ir = IR(listeners=(listener("ingress/http", "0.0.0.0", 80), listener("v6", "::1", 8080)))
    assert listener_changes(None, ir) == [
        "serving HTTP on 0.0.0.0:80 (ingress/http)", "serving HTTP on [::1]:8080 (v6)"]


def test_changes_name_added_moved_and_removed_listeners_only() -> None:
    """An unchanged listener is not repeated; a moved one is logged at its new address."""
    before = IR(listeners=(listener("a", "127.0.0.1", 80), listener("b", "127.0.0.1", 81),
                           listener("c", "127.0.0.1", 82)))
    after = IR(listeners=(listener("a", "127.0.0.1", 80), listener("b", "127.0.0.2", 81),
                          listener("d", "127.0.0.1", 83)))
    assert listener_changes(before, after) == [
        "serving HTTP on 127.0.0.2:81 (b)", "serving HTTP on 127.0.0.1:83 (d)",
        "no longer serving HTTP on 127.0.0.1:82 (c)"]


def test_nothing_to_serve_at_start_is_said() -> None:
    """An empty folder at start is not silence."""
    assert listener_changes(None, IR()) == ["serving nothing yet: no listener in the manifests"]
