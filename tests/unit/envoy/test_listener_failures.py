"""A listener Envoy accepted and then could not listen on is reported as that engine's
rejection (issue 23.2): Envoy sends no NACK then, only a log line. From the line, through the
engine's report, to the pipeline's rejection."""

from __future__ import annotations

from podway.engines.member_health import (
    MemberHealthReports,
    Message,
    Refusal,
    decode,
    encode,
    encode_parts,
)
from podway.envoy import types
from podway.envoy.engine.listener_failures import ListenerFailures
from podway.envoy.xds.protocol import Ack
from tests.unit.test_pipeline import LISTENER, WEB, pipeline, update

# What Envoy 1.40 logs when two engines got the listener at once and the other listened first.
LINE = ("[2026-12-05 02:46:29.692][error] final pre-worker listener init for listener "
        "'ingress/http' failed: cannot listen() errno=98")
OLDER = ("[2024-01-01 00:00:00.000][error] listener 'svc/a/80/tcp' failed to listen on "
         "address '127.0.0.1:80' on worker")


def test_the_log_line_names_the_listener_and_says_why() -> None:
    failures = ListenerFailures()
    told: list[Refusal] = []
    failures.subscribe(told.append)
    failures.line("[2026-12-05][warning] something else about listener 'x'")
    assert told == []
    failures.line(LINE)
    failures.line(OLDER)
    assert [r.listener for r in told] == ["ingress/http", "svc/a/80/tcp"]
    assert "address already in use" in told[0].reason
    assert "accepted the listener, then could not listen" in told[0].reason
    assert told[0].seq < told[1].seq
    failures.line(LINE)  # again: a new failure, the newest kept per listener
    assert len(told) == 3
    assert [r.listener for r in failures.items()] == ["svc/a/80/tcp", "ingress/http"]
    assert failures.items()[-1].seq == told[-1].seq


def test_refusals_travel_in_the_report() -> None:
    refused = (Refusal("ingress/http", 7, "could not listen"),)
    message = Message(node="e1", full=True, hosts={}, group="g", refused=refused)
    assert decode(encode(message)).refused == refused
    parts = encode_parts(Message(node="e1", full=False, hosts={},
                                 removed=tuple(("c", f"10.0.{i // 250}.{i % 250}:80")
                                               for i in range(3000)), refused=refused),
                         limit=4096)
    assert len(parts) > 1
    assert decode(parts[0]).refused == refused
    assert all(decode(p).refused == () for p in parts[1:])
    assert decode(encode(Message(node="e1", full=True, hosts={}))).refused == ()


def test_each_refusal_is_told_once_per_failure() -> None:
    reports = MemberHealthReports()
    told: list[tuple[str, str]] = []
    reports.on_refused(lambda node, r: told.append((node, r.listener)))
    first = Refusal("ingress/http", 1, "could not listen")
    stream = object()
    reports.apply(stream, Message(node="e1", full=True, hosts={}, refused=(first,)))
    reports.apply(stream, Message(node="e1", full=False, hosts={}, refused=(first,)))
    reconnected = object()  # a new stream repeats the engine's list: nothing new
    reports.apply(reconnected, Message(node="e1", full=True, hosts={}, refused=(first,)))
    assert told == [("e1", "ingress/http")]
    again = Refusal("ingress/http", 2, "could not listen")
    reports.apply(reconnected, Message(node="e1", full=False, hosts={}, refused=(again,)))
    assert told == [("e1", "ingress/http")] * 2


async def test_the_refusal_is_the_engines_rejection_until_it_accepts_the_listener() -> None:
    pipe, _ = pipeline()
    pipe.apply(update(WEB))
    pipe.engine_refused("e1", LISTENER, "the engine accepted the listener, then could not "
                        "listen on its port: cannot listen() errno=98")
    state = pipe.state
    assert state is not None
    assert [(r.node, r.type_name, r.resource) for r in state.rejections] == [
        ("e1", "Listener", LISTENER)]
    assert "could not listen" in state.rejections[0].message
    # Another engine's ACK changes nothing; this engine's ACK of the listener clears it.
    pipe.on_event(Ack(node="e2", type_url=types.LISTENER, version="v2", nonce="2",
                      resources=(LISTENER,)))
    assert pipe.state is not None
    assert len(pipe.state.rejections) == 1
    pipe.on_event(Ack(node="e1", type_url=types.LISTENER, version="v2", nonce="3",
                      resources=(LISTENER,)))
    assert pipe.state is not None
    assert pipe.state.rejections == ()


def test_a_failure_envoy_counted_but_the_log_did_not_name_is_reported() -> None:
    """The fallback on ``listener_create_failure``: after the counter held still for one
    look, each listener seen draining-only since is reported, unless the log named it."""
    failures = ListenerFailures()
    told: list[Refusal] = []
    failures.subscribe(told.append)
    failures.new_envoy()
    assert failures.counted(0, ()) == ()
    assert failures.unexplained(1) == 1
    assert failures.counted(1, {"ingress/http"}) == ()  # moving: the log may still come
    found = failures.counted(1, ())  # still, and unexplained: seen draining-only before
    assert [r.listener for r in found] == ["ingress/http"]
    assert "listener_create_failure" in found[0].reason
    assert told == list(found)
    assert failures.counted(1, ()) == ()  # told once
    assert failures.unexplained(1) == 0


def test_a_logged_failure_is_not_reported_twice() -> None:
    failures = ListenerFailures()
    failures.new_envoy()
    failures.line(LINE)
    assert failures.unexplained(1) == 0
    failures.counted(1, ())
    assert failures.counted(1, ()) == ()
    assert [r.listener for r in failures.items()] == ["ingress/http"]
    # Two failures, one logged: the other listener draining-only is the unexplained one.
    failures.line(LINE)
    assert failures.counted(3, {"ingress/http", "svc/a/80/tcp"}) == ()
    assert [r.listener for r in failures.counted(3, ())] == ["svc/a/80/tcp"]


def test_an_adopted_envoys_earlier_failures_are_not_reported() -> None:
    failures = ListenerFailures()
    failures.line(LINE)  # read after adoption, before the first look at the counter
    failures.adopted(6)  # five counted before this engine followed it, one logged since
    assert failures.unexplained(6) == 0
    assert failures.counted(6, {"old"}) == ()
    assert failures.counted(6, ()) == ()
    assert [r.listener for r in failures.items()] == ["ingress/http"]
