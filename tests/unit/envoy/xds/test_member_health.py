"""Member health reports: the wire format, the controller's per-engine views (full, changes,
reconnects, disconnects), who may report, and the engine's reporter against a fake Envoy admin."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from aiohttp import web

from podway.engines import member_health
from podway.engines.member_health import (
    PATH,
    Health,
    HostState,
    MemberHealthReports,
    Message,
    ReportError,
    decode,
    diff,
    encode,
    encode_parts,
    join,
)
from podway.envoy.engine.health_report import Reporter, ReportOptions, classify, parse
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.server import XdsServer
from tests.waiting import eventually

A = ("pool/default/web/80", "10.0.0.7:8080")
B = ("pool/default/web/80", "10.0.0.8:8080")
OK = HostState(Health.HEALTHY)
SICK = HostState(Health.UNHEALTHY, "failed active health check")


def test_messages_round_trip_compactly() -> None:
    """encode → decode gives the same message; the bytes carry no spaces."""
    message = Message(node="edge-1", full=False, hosts={A: OK, B: SICK}, removed=(A,))
    data = encode(message)
    assert b" " not in data.replace(b"failed active health check", b"")
    back = decode(data)
    assert (back.node, back.full, dict(back.hosts), back.removed) == (
        "edge-1", False, {A: OK, B: SICK}, (A,))


def test_a_full_report_names_the_engine_group_and_older_reports_mean_none() -> None:
    """The group travels in a full message (trimmed); a report without it (an older engine, or
    no group) is group ""; the bytes of a report without a group are what older controllers
    read; a change message carries no group."""
    full = decode(encode(Message(node="e", full=True, hosts={A: OK}, group="shop")))
    assert full.group == "shop"
    assert b'"group"' not in encode(Message(node="e", full=True, hosts={A: OK}))
    assert b'"group"' not in encode(Message(node="e", full=False, hosts={}, group="shop"))
    older = b'{"v":1,"node":"e","full":true,"hosts":[],"removed":[]}'
    assert decode(older).group == ""
    assert decode(b'{"v":1,"node":"e","full":true,"group":" shop "}').group == "shop"


def test_the_group_of_a_node_follows_its_newest_full_report() -> None:
    """``groups``: each reporting node's group; a reconnect may change it; the stream's end
    drops it with the view."""
    reports = MemberHealthReports()
    old, new = object(), object()
    reports.apply(old, Message(node="e", full=True, hosts={}, group="a"))
    reports.apply(object(), Message(node="f", full=True, hosts={}))
    assert dict(reports.groups) == {"e": "a", "f": ""}
    reports.apply(new, Message(node="e", full=True, hosts={}, group="b"))
    assert reports.groups["e"] == "b"
    reports.close(new)
    assert dict(reports.groups) == {"f": ""}


@pytest.mark.parametrize("data", [b"{", b"[]", b'{"v":2,"node":"n","full":true}',
                                  b'{"v":1,"full":true}', b'{"v":1,"node":"n","full":true,'
                                  b'"hosts":[["c","a","weird",""]]}',
                                  b'{"v":1,"node":"n","full":true,"hosts":{}}',
                                  b'{"v":1,"node":"n","full":true,"removed":[["c"]]}',
                                  b'{"v":1,"node":"n","full":true,"group":7}',
                                  b'{"v":1,"node":"%s","full":true}' % (b"n" * 1025),
                                  b'{"v":1,"node":"n","full":true,"hosts":[["%s","a",'
                                  b'"healthy",""]]}' % (b"c" * 1025)])
def test_a_bad_report_is_one_report_error(data: bytes) -> None:
    """Junk, another version, a missing node, an unknown health, wrong shapes, names past
    ``MAX_TEXT``: ReportError."""
    with pytest.raises(ReportError) as info:
        decode(data)
    assert "\n" not in str(info.value)


def test_a_long_reason_is_cut_and_a_view_cannot_outgrow_its_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Reasons (shown in Pod conditions) are cut to ``MAX_REASON``; a report of too many hosts,
    or changes growing a view past ``MAX_HOSTS``, is a ReportError (the stream then ends and its
    view goes)."""
    long = encode(Message(node="e", full=True, hosts={A: HostState(Health.UNHEALTHY, "x" * 5000)}))
    assert len(decode(long).hosts[A].reason) == member_health.MAX_REASON
    monkeypatch.setattr(member_health, "MAX_HOSTS", 1)
    with pytest.raises(ReportError):
        decode(encode(Message(node="e", full=True, hosts={A: OK, B: OK})))
    reports, stream = MemberHealthReports(), object()
    reports.apply(stream, Message(node="e", full=True, hosts={A: OK}))
    with pytest.raises(ReportError):
        reports.apply(stream, Message(node="e", full=False, hosts={B: OK}))
    reports.close(stream)
    assert reports.view("e") is None


def test_a_large_report_goes_in_parts_under_the_bound_that_add_up_to_it() -> None:
    """``encode_parts``: every part at most the limit, only the first full (with the group),
    all but the last say ``more``; joined in order they are the message again."""
    hosts = {(f"pool/default/s{i}/80", f"10.0.{i // 250}.{i % 250}:8080"): SICK
             for i in range(2000)}
    removed = tuple((f"pool/default/gone{i}/80", "10.9.0.1:80") for i in range(500))
    message = Message(node="e", full=True, hosts=hosts, removed=removed, group="g")
    parts = encode_parts(message, limit=8192)
    assert len(parts) > 10
    assert all(len(p) <= 8192 for p in parts)
    decoded = [decode(p) for p in parts]
    assert [d.full for d in decoded] == [True] + [False] * (len(parts) - 1)
    assert [d.more for d in decoded] == [True] * (len(parts) - 1) + [False]
    assert decoded[0].group == "g"
    whole = decoded[0]
    for part in decoded[1:]:
        whole = join(whole, part)
    assert (whole.full, whole.more, whole.group) == (True, False, "g")
    assert dict(whole.hosts) == hosts
    assert set(whole.removed) == set(removed)
    assert encode_parts(Message(node="e", full=False, hosts={A: OK})) == \
        [encode(Message(node="e", full=False, hosts={A: OK}))]


def test_diff_names_changed_and_removed_hosts() -> None:
    assert diff({A: OK, B: OK}, {A: SICK}) == ({A: SICK}, (B,))
    assert diff({A: OK}, {A: OK}) == ({}, ())


def test_views_follow_the_newest_stream_of_each_node() -> None:
    """A full report replaces; changes apply; an older stream of a reconnected node is ignored
    and its end drops nothing; the owner's end drops the view; listeners hear each change."""
    reports = MemberHealthReports()
    heard: list[int] = []
    reports.subscribe(lambda: heard.append(1))
    old, new = object(), object()
    reports.apply(old, Message(node="e", full=True, hosts={A: OK}))
    reports.apply(old, Message(node="e", full=False, hosts={B: OK}))
    assert dict(reports.view("e") or {}) == {A: OK, B: OK}
    reports.apply(new, Message(node="e", full=True, hosts={A: SICK}))
    reports.apply(old, Message(node="e", full=False, hosts={B: SICK}))  # stale: ignored
    assert dict(reports.view("e") or {}) == {A: SICK}
    reports.close(old)
    assert reports.view("e") is not None
    reports.apply(new, Message(node="e", full=False, hosts={}, removed=(A,)))
    assert dict(reports.view("e") or {}) == {}
    reports.close(new)
    assert reports.view("e") is None
    assert len(heard) == 5


def test_change_listeners_hear_which_hosts_moved() -> None:
    """A change listener hears the hosts of each message that moved (a whole view replacing
    another: the hosts that differ), and None when a node's view appears or goes; a stale
    stream's news are not heard."""
    reports = MemberHealthReports()
    heard: list[tuple[str, frozenset[tuple[str, str]] | None]] = []
    reports.on_change(lambda node, hosts: heard.append((node, hosts)))
    old, new = object(), object()
    reports.apply(old, Message(node="e", full=True, hosts={A: OK}))
    reports.apply(old, Message(node="e", full=False, hosts={B: SICK}))
    reports.apply(new, Message(node="e", full=True, hosts={A: OK, B: OK}))
    reports.apply(old, Message(node="e", full=False, hosts={A: SICK}))  # stale: not heard
    reports.apply(new, Message(node="e", full=False, hosts={}, removed=(A,)))
    reports.close(new)
    assert heard == [("e", None), ("e", frozenset({B})), ("e", frozenset({B})),
                     ("e", frozenset({A})), ("e", None)]


@pytest.mark.parametrize(("flags", "health"), [
    ({"eds_health_status": "UNHEALTHY"}, Health.HEALTHY),  # Kubernetes readiness: ignored
    ({"failed_active_health_check": True, "pending_active_hc": True}, Health.PENDING),
    ({"failed_active_health_check": True}, Health.UNHEALTHY),
    ({"failed_outlier_check": True}, Health.UNHEALTHY),
    ({"eds_health_status": "HEALTHY", "failed_active_degraded_check": True}, Health.HEALTHY),
])
def test_classify_reads_what_envoy_measured(flags: dict[str, Any], health: Health) -> None:
    """A new host (failed + pending) is pending, not unhealthy; EDS status never counts."""
    assert classify(flags).health is health


ENVOY_TEXT = """\
pool/default/web/80::observability_name::pool/default/web/80
pool/default/web/80::default_priority::max_connections::1024
pool/default/web/80::10.0.0.7:8080::cx_active::0
pool/default/web/80::10.0.0.7:8080::health_flags::/failed_eds_health
pool/default/web/80::10.0.0.7:8080::weight::1
pool/default/web/80::10.0.0.8:8080::health_flags::/failed_active_hc/pending_active_hc
pool/default/web/443::[fd00::7]:8443::health_flags::/failed_active_hc/active_hc_timeout
pool/default/web/443::10.0.0.9:8443::health_flags::/failed_outlier_check
podway-xds::/run/podway/xds.sock::health_flags::healthy
junk::health_flags::healthy
"""


def test_parse_reads_only_the_health_flag_lines_of_envoy_s_text_answer() -> None:
    """Every host's flags, as Envoy prints them: EDS failure ignored, a new host pending, an
    IPv6 host named without brackets, a timeout said; other lines and junk are skipped."""
    found = {k: (v.health, v.reason) for k, v in parse(ENVOY_TEXT).items()}
    assert found[A] == (Health.HEALTHY, "")
    assert found[B] == (Health.PENDING, "waiting for its first health check")
    assert found[("pool/default/web/443", "fd00::7:8443")] == (
        Health.UNHEALTHY, "failed active health check (timeout)")
    assert found[("pool/default/web/443", "10.0.0.9:8443")] == (
        Health.UNHEALTHY, "ejected by outlier detection")
    assert ("junk", "") not in found
    assert dict(parse("")) == {}
    assert dict(parse("no flags here\n::health_flags::")) == {}


# ---- over gRPC ------------------------------------------------------------------------


class FakeAdmin:
    """An Envoy admin answering ``/clusters`` (text, as Envoy) with ``hosts`` (changeable)."""

    def __init__(self) -> None:
        self.hosts: dict[tuple[str, str], str] = {}  # (cluster, host) → health_flags

    async def clusters(self, _: web.Request) -> web.Response:
        lines = [f"{c}::observability_name::{c}" for c in sorted({c for c, _ in self.hosts})]
        lines += [f"{c}::{h}::health_flags::{flags}\n{c}::{h}::weight::1"
                  for (c, h), flags in self.hosts.items()]
        return web.Response(text="\n".join(lines) + "\n")


@pytest.fixture
async def admin(short_dir: Path) -> AsyncIterator[tuple[FakeAdmin, str]]:
    fake = FakeAdmin()
    app = web.Application()
    app.router.add_get("/clusters", fake.clusters)
    runner = web.AppRunner(app)
    await runner.setup()
    path = short_dir / "admin.sock"
    await web.UnixSite(runner, str(path)).start()
    try:
        yield fake, f"unix:{path}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def served(short_dir: Path) -> AsyncIterator[tuple[XdsServer, MemberHealthReports]]:
    reports = MemberHealthReports()
    server = XdsServer(Cache(), "127.0.0.1:0", unauthenticated=True)
    server.handlers.append(reports.handler(server))
    await server.start(local=short_dir / "xds.sock")
    try:
        yield server, reports
    finally:
        await server.stop(grace=0)




async def test_reporter_sends_the_whole_view_then_changes_and_its_end_drops_it(
        served: tuple[XdsServer, MemberHealthReports], admin: tuple[FakeAdmin, str]) -> None:
    """Over the unix socket: the controller's view follows the fake Envoy's (a host failing,
    one added, one removed), the engine group comes with it, and both are gone when the
    reporter stops."""
    server, reports = served
    fake, address = admin
    fake.hosts = {A: "healthy"}
    assert server.local_target is not None
    reporter = Reporter(ReportOptions(node_id="edge-1", xds=server.local_target,
                                      interval_s=0.02, engine_group="shop"), lambda: address)
    task = asyncio.create_task(reporter.run())
    try:
        await eventually(lambda: dict(reports.view("edge-1") or {}) == {A: OK})
        assert reports.groups["edge-1"] == "shop"  # from the stream's first (full) message
        fake.hosts = {A: "/failed_active_hc", B: "/failed_active_hc/pending_active_hc"}
        await eventually(lambda: {k: v.health for k, v in (reports.view("edge-1") or {}).items()}
                    == {A: Health.UNHEALTHY, B: Health.PENDING})
        fake.hosts = {B: "/failed_eds_health"}
        await eventually(lambda: dict(reports.view("edge-1") or {}) == {B: OK})
        sent = reporter.sent
        assert sent == 3  # one full, two changes: polls without news send nothing
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    await eventually(lambda: reports.view("edge-1") is None)


async def test_nothing_is_reported_before_envoy_admin_answers(
        served: tuple[XdsServer, MemberHealthReports], admin: tuple[FakeAdmin, str]) -> None:
    """No admin address yet: no report (the engine still blocks True); then the full view."""
    server, reports = served
    _, address = admin
    ready: list[str] = []
    asked: list[int] = []

    def admin_address() -> str | None:
        asked.append(1)
        return ready[0] if ready else None

    assert server.local_target is not None
    reporter = Reporter(ReportOptions(node_id="edge-1", xds=server.local_target,
                                      interval_s=0.02), admin_address)
    task = asyncio.create_task(reporter.run())
    try:
        await eventually(lambda: len(asked) >= 5)  # five polls found no admin
        assert reports.view("edge-1") is None
        assert reporter.sent == 0
        ready.append(address)
        await eventually(lambda: reports.view("edge-1") is not None)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _report_raw(target: str, *messages: bytes) -> grpc.StatusCode:
    async with grpc.aio.insecure_channel(target) as channel:
        async def requests() -> AsyncIterator[bytes]:
            for message in messages:
                yield message

        try:
            await channel.stream_unary(PATH)(requests())
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK


async def test_an_unauthenticated_engine_is_not_heard(
        served: tuple[XdsServer, MemberHealthReports],
        caplog: pytest.LogCaptureFixture) -> None:
    """Clear-text loopback TCP (--xds-unauthenticated) may get config, never move a Pod's
    readiness: PERMISSION_DENIED and one warning; the unix socket is heard."""
    server, reports = served
    full = encode(Message(node="edge-1", full=True, hosts={A: OK}))
    with caplog.at_level(logging.WARNING):
        code = await _report_raw(f"127.0.0.1:{server.port}", full)
    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert reports.nodes == frozenset()
    assert any("not authenticated" in r.message for r in caplog.records)
    assert server.local_target is not None
    assert await _report_raw(server.local_target, full) is grpc.StatusCode.OK


async def test_a_stream_must_begin_with_a_full_report(
        served: tuple[XdsServer, MemberHealthReports]) -> None:
    """Changes before a full view, or junk: INVALID_ARGUMENT, and no view is left behind."""
    server, reports = served
    assert server.local_target is not None
    change = encode(Message(node="edge-1", full=False, hosts={A: OK}))
    assert await _report_raw(server.local_target, change) is \
        grpc.StatusCode.INVALID_ARGUMENT
    full = encode(Message(node="edge-1", full=True, hosts={A: OK}))
    assert await _report_raw(server.local_target, full, b"junk") is \
        grpc.StatusCode.INVALID_ARGUMENT
    assert reports.nodes == frozenset()


async def test_changes_that_outgrow_the_view_bound_end_the_stream(
        served: tuple[XdsServer, MemberHealthReports], monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine whose changes keep adding hosts past ``MAX_HOSTS``: INVALID_ARGUMENT and its
    view is dropped (memory stays bounded)."""
    server, reports = served
    assert server.local_target is not None
    monkeypatch.setattr(member_health, "MAX_HOSTS", 1)
    full = encode(Message(node="edge-1", full=True, hosts={A: OK}))
    more = encode(Message(node="edge-1", full=False, hosts={B: OK}))
    assert await _report_raw(server.local_target, full, more) is \
        grpc.StatusCode.INVALID_ARGUMENT
    assert reports.nodes == frozenset()


async def test_a_view_over_grpc_s_4_mib_arrives_whole(
        served: tuple[XdsServer, MemberHealthReports], admin: tuple[FakeAdmin, str]) -> None:
    """An engine with 70,000 members (its report ~6 MiB, over gRPC's 4 MiB message bound):
    the controller gets the whole view (sent in parts), then a change to it."""
    server, reports = served
    fake, address = admin
    many = {(f"pool/default/service-with-a-longer-name-{i // 10}/8080",
             f"10.{i // 62500}.{i // 250 % 250}.{i % 250}:8080"): "healthy"
            for i in range(70_000)}
    fake.hosts = dict(many)
    whole = encode(Message(node="edge-1", full=True, hosts=dict.fromkeys(many, OK)))
    assert len(whole) > 4 * 1024 * 1024  # what was refused on every retry
    assert server.local_target is not None
    reporter = Reporter(ReportOptions(node_id="edge-1", xds=server.local_target,
                                      interval_s=0.2), lambda: address)
    task = asyncio.create_task(reporter.run())
    try:
        await eventually(lambda: len(reports.view("edge-1") or {}) == 70_000, within=60)
        first = next(iter(many))
        fake.hosts[first] = "/failed_active_hc"
        await eventually(lambda: (reports.view("edge-1") or {}).get(first) == SICK, within=60)
        assert len(reports.view("edge-1") or {}) == 70_000
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
