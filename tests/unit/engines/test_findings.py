"""A remote engine's ``UnsupportedValue`` findings (objects it serves not exactly as asked) reach
the objects' status as a local HAProxy engine's do: from the engine's render, through its
member-health report, to the controller's pipeline state."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from podway.engines.member_health import (
    Finding,
    Health,
    HostState,
    MemberHealthReports,
    Message,
    ReportError,
    decode,
    encode,
    encode_parts,
)
from podway.engines.reporter import ReportOptions
from podway.haproxy.report import Unsupported, findings
from podway.model.base import ObjectRef
from podway.programs.remote_engine import RemoteEngine, RemoteOptions
from podway.translate import Severity
from podway.translate.core.problems import Reason
from tests.unit.test_pipeline import WEB, pipeline, update

SERVICE = ObjectRef("Service", "shop", "web")
WARN = Finding("Service", "shop", "web", "the haproxy engine cannot serve transparent client "
               "addresses (original source) (service/shop/web/8080/tcp)")
CLOSED = Finding("Service", "shop", "web", "the haproxy engine cannot serve UDP listeners "
                 "(service/shop/web/53/udp)", closed=True)


def test_findings_travel_in_the_report() -> None:
    message = Message(node="h1", full=True, hosts={}, unsupported=(WARN, CLOSED))
    assert decode(encode(message)).unsupported == (WARN, CLOSED)
    assert decode(encode(Message(node="h1", full=True, hosts={}))).unsupported == ()
    # In parts: the first part carries the list, later parts none (the list is whole each time).
    hosts = {("pool/shop/web/8080/tcp", f"10.0.0.{i}:80"): HostState(Health.HEALTHY)
             for i in range(50)}
    parts = encode_parts(Message(node="h1", full=True, hosts=hosts, unsupported=(WARN,)),
                         limit=1000)
    assert len(parts) > 1
    assert decode(parts[0]).unsupported == (WARN,)
    assert all(decode(p).unsupported == () for p in parts[1:])


def test_a_bad_finding_ends_the_report() -> None:
    good = encode(Message(node="h1", full=True, hosts={}, unsupported=(WARN,)))
    for bad in (b'["Service","shop","web","m","yes"]', b'["","shop","web","m",false]',
                b'["Service","shop","web"]'):
        with pytest.raises(ReportError, match="bad unsupported entry"):
            decode(good.replace(encode_entry(WARN), bad))


def encode_entry(f: Finding) -> bytes:
    text = encode(Message(node="h1", full=True, hosts={}, unsupported=(f,))).decode()
    start = text.index('"unsupported":[') + len('"unsupported":[')
    return text[start:text.index("]", start) + 1].encode()


def test_reports_tell_each_change_of_a_nodes_findings_and_clear_them_when_it_goes() -> None:
    reports = MemberHealthReports()
    told: list[tuple[str, tuple[Finding, ...]]] = []
    reports.on_findings(lambda node, found: told.append((node, found)))
    stream = object()
    reports.apply(stream, Message(node="h1", full=True, hosts={}, unsupported=(WARN,)))
    reports.apply(stream, Message(node="h1", full=False, hosts={}, unsupported=(WARN,)))
    assert told == [("h1", (WARN,))]  # the same list again says nothing
    reports.apply(stream, Message(node="h1", full=False, hosts={}, unsupported=()))
    assert told[-1] == ("h1", ())
    reports.apply(stream, Message(node="h1", full=False, hosts={}, unsupported=(CLOSED,)))
    reports.close(stream)  # the engine stopped reporting: its findings go with its view
    assert told[-2:] == [("h1", (CLOSED,)), ("h1", ())]


def test_the_engines_findings_are_problems_on_their_objects_in_a_new_state() -> None:
    pipe, _ = pipeline()
    pipe.apply(update(WEB))
    before = pipe.state
    assert before is not None
    assert not [p for p in before.problems if p.reason is Reason.UNSUPPORTED_VALUE]
    gone = Finding("Service", "shop", "deleted", "the haproxy engine cannot serve it")
    pipe.engine_findings("h1", (WARN, gone))
    pipe.engine_findings("h2", (WARN, CLOSED))  # another engine of the group: said once
    state = pipe.state
    assert state is not None
    assert state.version > before.version
    found = [(p.ref, p.severity, p.message) for p in state.problems
             if p.reason is Reason.UNSUPPORTED_VALUE]
    assert found == [(SERVICE, Severity.ERROR, CLOSED.message),
                     (SERVICE, Severity.WARNING, WARN.message)]  # "deleted" is not there
    assert state.result.problems_by_object()[SERVICE]
    # A new generation keeps them; an engine saying "none" (or gone) drops its own.
    pipe.apply(update(WEB))
    assert pipe.state is not None
    assert len([p for p in pipe.state.problems if p.reason is Reason.UNSUPPORTED_VALUE]) == 2
    pipe.engine_findings("h2", ())
    assert pipe.state is not None
    assert [p.message for p in pipe.state.problems
            if p.reason is Reason.UNSUPPORTED_VALUE] == [WARN.message]
    pipe.engine_findings("h1", ())
    assert pipe.state is not None
    assert not [p for p in pipe.state.problems if p.reason is Reason.UNSUPPORTED_VALUE]


def test_the_haproxy_engine_reports_what_it_renders_unsupported(tmp_path: Path) -> None:
    reports = (Unsupported(subject="service/shop/web/8080/tcp", origin=SERVICE,
                           feature="transparent client addresses (original source)"),
               Unsupported(subject="service/shop/web/53/udp", origin=SERVICE, closed=True,
                           feature="UDP listeners"),
               Unsupported(subject="nameless", feature="something"))  # no object: not sent
    assert findings(reports) == (CLOSED, WARN)
    engine = RemoteEngine(RemoteOptions(kind="haproxy", folder=tmp_path,
                                        report=ReportOptions(node_id="h1", xds="unix:/x")))
    assert engine.unsupported() == ()  # no HAProxy yet
    engine.haproxy = SimpleNamespace(  # type: ignore[assignment]
        counters=SimpleNamespace(unsupported=reports))
    assert engine.unsupported() == (CLOSED, WARN)


def test_a_reported_configuration_round_trips_within_its_bound() -> None:
    """An engine's configuration (file → text) travels in the first part of a report only;
    one over the bound, or not made of texts, is refused; a stream's end drops it."""
    import json

    import pytest

    from podway.engines import member_health as mh

    hosts = {(f"pool/{i}", "10.0.0.1:80"): mh.HostState(mh.Health.HEALTHY) for i in range(50)}
    message = mh.Message(node="hap-1", full=True, hosts=hosts,
                         config={"haproxy.cfg": "global\n", "maps/a.map": "x y\n"})
    parts = [mh.decode(p) for p in mh.encode_parts(message, limit=600)]
    assert len(parts) > 1
    assert parts[0].config == message.config
    assert all(p.config is None for p in parts[1:])
    reports = mh.MemberHealthReports()
    stream = object()
    reports.apply(stream, mh.join(parts[0], parts[1]))
    assert reports.configs() == {"hap-1": message.config}
    reports.close(stream)
    assert reports.configs() == {}
    big = json.dumps({"v": 1, "node": "n", "full": True, "hosts": [], "removed": [],
                      "config": {"haproxy.cfg": "x" * (mh.MAX_CONFIG_CHARS + 1)}})
    with pytest.raises(mh.ReportError, match="configuration over"):
        mh.decode(big.encode())
    with pytest.raises(mh.ReportError, match="file names to texts"):
        mh.decode(b'{"v":1,"node":"n","full":true,"hosts":[],"removed":[],"config":{"a":1}}')
