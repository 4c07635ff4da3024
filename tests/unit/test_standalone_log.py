"""`podway run` says where it serves: each listener once the engine listens on it, a listener
the engine refused (its port taken) as not served, and every later change."""

from __future__ import annotations

import logging

from podway.ir import IR, Listener
from podway.ir import ListenerProtocol as Protocol
from podway.programs.standalone import ListenerLog

INFO, WARNING = logging.INFO, logging.WARNING


def listener(name: str, address: str, port: int) -> Listener:
    return Listener(name=name, address=address, port=port, protocol=Protocol.HTTP)


def bound(ir: IR) -> dict[str, tuple[str, int]]:
    return {ls.name: (ls.address, ls.port) for ls in ir.listeners}


def test_start_lists_every_listener_with_its_address_once_bound() -> None:
    """Every bound listener is named with protocol, address and port (IPv6 bracketed)."""
    ir = IR(listeners=(listener("ingress/http", "0.0.0.0", 80), listener("v6", "::1", 8080)))
    assert ListenerLog().step(ir, {}, bound(ir)) == [
        (INFO, "serving HTTP on 0.0.0.0:80 (ingress/http)"),
        (INFO, "serving HTTP on [::1]:8080 (v6)")]


def test_serving_is_never_said_before_the_engine_listens_nor_for_a_refused_port() -> None:
    """Configured but not bound yet: nothing, and still waiting. The engine refuses the port
    (taken by another program): one warning with its message, never "serving"; once bound
    (the port freed and pushed again), "serving"."""
    ir = IR(listeners=(listener("a", "127.0.0.1", 18080),))
    lines = ListenerLog()
    assert lines.step(ir, {}, None) == []
    assert lines.step(ir, {}, {}) == []
    assert lines.waiting(ir, {})
    refused = {"a": "cannot bind '127.0.0.1:18080': Address already in use"}
    assert not lines.waiting(ir, refused)  # nothing to poll the engine for
    assert lines.step(ir, refused, {}) == [
        (WARNING, "not serving HTTP on 127.0.0.1:18080 (a): the engine refused it: "
         "cannot bind '127.0.0.1:18080': Address already in use")]
    assert lines.step(ir, refused, {}) == []  # said once
    assert lines.step(ir, {}, bound(ir)) == [(INFO, "serving HTTP on 127.0.0.1:18080 (a)")]
    assert not lines.waiting(ir, {})


def test_changes_name_added_moved_and_removed_listeners_only() -> None:
    """An unchanged listener is not repeated; a moved one is logged at its new address once
    the engine listens there."""
    before = IR(listeners=(listener("a", "127.0.0.1", 80), listener("b", "127.0.0.1", 81),
                           listener("c", "127.0.0.1", 82)))
    after = IR(listeners=(listener("a", "127.0.0.1", 80), listener("b", "127.0.0.2", 81),
                          listener("d", "127.0.0.1", 83)))
    lines = ListenerLog()
    lines.step(before, {}, bound(before))
    assert lines.step(after, {}, bound(before)) == [
        (INFO, "no longer serving HTTP on 127.0.0.1:82 (c)")]
    assert lines.step(after, {}, bound(after)) == [
        (INFO, "serving HTTP on 127.0.0.2:81 (b)"), (INFO, "serving HTTP on 127.0.0.1:83 (d)")]


def test_without_an_engine_of_its_own_listeners_are_said_when_configured() -> None:
    """``--no-engine``: remote engines serve; there are no sockets to ask about."""
    ir = IR(listeners=(listener("a", "127.0.0.1", 80),))
    assert ListenerLog(engine=False).step(ir, {}, None) == [
        (INFO, "serving HTTP on 127.0.0.1:80 (a)")]


def test_nothing_to_serve_at_start_is_said() -> None:
    """An empty folder at start is not silence."""
    assert ListenerLog().step(IR(), {}, None) == [
        (INFO, "serving nothing yet: no listener in the manifests")]
