"""A remote HAProxy engine's refusals (listeners it cannot serve now: a port it cannot bind, a
configuration HAProxy refused) travel in its member-health report as STATE — the whole current
set each time — so the controller records each as that engine's rejection of the listener, clears
one the engine no longer names, and drops them all when the engine's stream ends."""

from __future__ import annotations

import pytest

from podway.engines.member_health import (
    Health,
    HostState,
    MemberHealthReports,
    Message,
    Refused,
    ReportError,
    decode,
    encode,
    encode_parts,
)
from podway.envoy import types
from podway.haproxy.process import HAProxyError
from podway.ir import IR
from podway.programs.remote_engine import refusing
from podway.status.refusals import port_unavailable
from tests.unit.test_pipeline import WEB, pipeline, update

BIND = "haproxy could not bind its port on 127.0.0.1:8080: cannot bind socket (Address " \
       "already in use)"
BOUND = Refused("service/shop/web/8080/tcp", BIND)
OTHER = Refused("service/shop/api/9090/tcp", "the haproxy engine refused the configuration: x")


def test_the_current_set_round_trips_in_the_report() -> None:
    message = Message(node="h1", full=True, hosts={}, refusing=(OTHER, BOUND))
    assert decode(encode(message)).refusing == (OTHER, BOUND)
    assert decode(encode(Message(node="h1", full=False, hosts={}))).refusing == ()
    hosts = {("pool/shop/web/8080/tcp", f"10.0.0.{i}:80"): HostState(Health.HEALTHY)
             for i in range(50)}
    parts = encode_parts(Message(node="h1", full=True, hosts=hosts, refusing=(BOUND,)),
                         limit=1000)
    assert len(parts) > 1
    assert decode(parts[0]).refusing == (BOUND,)
    assert all(decode(p).refusing == () for p in parts[1:])
    with pytest.raises(ReportError, match="bad refusing entry"):
        decode(encode(message).replace(b'"refusing":[[', b'"refusing":[[7,'))


def test_reports_tell_each_change_of_the_set_and_clear_it_when_the_stream_ends() -> None:
    reports = MemberHealthReports()
    told: list[tuple[str, tuple[Refused, ...]]] = []
    reports.on_refusing(lambda node, now: told.append((node, now)))
    stream = object()
    reports.apply(stream, Message(node="h1", full=True, hosts={}, refusing=(BOUND,)))
    reports.apply(stream, Message(node="h1", full=False, hosts={}, refusing=(BOUND,)))
    assert told == [("h1", (BOUND,))]  # the same set again says nothing
    reports.apply(stream, Message(node="h1", full=False, hosts={}, refusing=(OTHER,)))
    reports.apply(stream, Message(node="h1", full=False, hosts={}))  # fixed: cleared
    assert told[1:] == [("h1", (OTHER,)), ("h1", ())]
    reports.apply(stream, Message(node="h1", full=False, hosts={}, refusing=(BOUND,)))
    reports.close(stream)  # the engine stopped reporting: everything of it goes
    assert told[-2:] == [("h1", (BOUND,)), ("h1", ())]


def test_the_set_is_the_engines_rejection_of_those_listeners_until_it_no_longer_names_them(
        ) -> None:
    pipe, _ = pipeline()
    pipe.apply(update(WEB))
    assert pipe.state is not None
    (listener,) = [ls.name for ls in pipe.state.ir.listeners]
    pipe.engine_refusing("h1", (Refused(listener, BIND),))
    state = pipe.state
    assert [(r.node, r.type_url, r.resource) for r in state.rejections] == [
        ("h1", types.LISTENER, listener)]
    assert port_unavailable(state.rejections[0])
    # A new generation keeps it (the engine has not said otherwise) ...
    pipe.apply(update(WEB))
    assert [r.resource for r in pipe.state.rejections] == [listener]
    # ... another reason replaces it, another engine's set is its own, and "none" clears.
    reload = Refused(listener, "the haproxy engine refused the configuration: bad")
    pipe.engine_refusing("h1", (reload,))
    pipe.engine_refusing("h2", (Refused(listener, BIND),))
    assert [(r.node, port_unavailable(r)) for r in pipe.state.rejections] == [
        ("h1", False), ("h2", True)]
    pipe.engine_refusing("h1", ())
    pipe.engine_refusing("h2", ())
    assert pipe.state.rejections == ()


def test_the_engine_names_what_haproxy_refused() -> None:
    pipe, _ = pipeline()
    pipe.apply(update(WEB))
    assert pipe.state is not None
    ir = pipe.state.ir
    (listener,) = [ls.name for ls in ir.listeners]
    bind = HAProxyError("haproxy did not reload", refused=((listener, BIND),))
    assert refusing(ir, None, bind) == (Refused(listener, BIND),)
    reload = HAProxyError("haproxy refused the rendered configuration: parse error")
    (new,) = refusing(ir, IR(), reload)  # a listener it does not serve yet
    assert new.listener == listener
    assert "parse error" in new.reason
    assert refusing(ir, ir, reload)[0].listener == listener  # nothing changed: all of them
