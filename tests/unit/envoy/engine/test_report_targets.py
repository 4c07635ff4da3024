"""The reporter's address fan-out, without DNS: which controller replicas each --xds address
names, which TLS name each is checked against, and what a failed lookup keeps."""

from __future__ import annotations

import logging

import pytest

from podway.engines.report_targets import Names, Target, dns_names, preferred, targets


def test_unix_sockets_and_ip_literals_are_dialled_as_given() -> None:
    """Nothing to resolve: one target each, checked against --xds-sni (or the IP itself)."""
    found = targets(["unix:/run/podway/xds.sock", "10.0.0.7:18000", "[fd00::7]:18000"], {})
    assert found == (Target("unix:/run/podway/xds.sock", "", "unix:/run/podway/xds.sock"),
                     Target("10.0.0.7:18000", "", "10.0.0.7:18000"),
                     Target("[fd00::7]:18000", "", "[fd00::7]:18000"))
    assert targets(["10.0.0.7:18000"], {}, sni="xds.podway")[0].name == "xds.podway"
    assert dns_names(["unix:/x", "10.0.0.7:1", "[fd00::7]:1", "podway-xds:18000"]) == (
        "podway-xds:18000",)


def test_a_dns_name_is_every_address_it_resolves_to_checked_against_the_name() -> None:
    """A headless Service name → one target per replica, dialled by IP (gRPC's ipv4:/ipv6:
    schemes, no second lookup), each verified against the DNS name; --xds-sni wins."""
    resolved = {"podway-xds:18000": ("10.0.0.7", "10.0.0.8")}
    found = targets(["podway-xds:18000"], resolved)
    assert [(t.dial, t.name) for t in found] == [("ipv4:10.0.0.7:18000", "podway-xds"),
                                                 ("ipv4:10.0.0.8:18000", "podway-xds")]
    assert {t.name for t in targets(["podway-xds:18000"], resolved, sni="xds.podway")} == {
        "xds.podway"}
    six = targets(["podway-xds:18000"], {"podway-xds:18000": ("fd00::7",)})
    assert six[0].dial == "ipv6:[fd00::7]:18000"


def test_a_name_not_resolved_yet_is_no_replica_and_the_same_address_is_one_stream() -> None:
    """Unresolved (or resolved to nothing): no target. Two entries reaching one address: one
    target, the first entry's (two streams of one engine would replace each other there)."""
    assert targets(["podway-xds:18000"], {}) == ()
    assert targets(["podway-xds:18000"], {"podway-xds:18000": ()}) == ()
    found = targets(["a.test:1", "b.test:1", "127.0.0.1:1"],
                    {"a.test:1": ("127.0.0.1",), "b.test:1": ("127.0.0.1", "127.0.0.2")})
    assert [(t.dial, t.name) for t in found] == [
        ("ipv4:127.0.0.1:1", "a.test"), ("ipv4:127.0.0.2:1", "b.test"), ("127.0.0.1:1", "")]


def test_ipv4_is_preferred_as_envoy_resolves_the_same_name() -> None:
    """"localhost" (127.0.0.1 and ::1) is one replica, not two; IPv6 only names stay IPv6;
    the answer's order does not matter."""
    assert preferred(["::1", "127.0.0.1"]) == ("127.0.0.1",)
    assert preferred(["10.0.0.8", "10.0.0.7", "10.0.0.8", "fd00::1"]) == ("10.0.0.7", "10.0.0.8")
    assert preferred(["fd00::2", "fd00::1"]) == ("fd00::1", "fd00::2")


async def test_a_failed_lookup_keeps_the_last_answer_and_says_so_once(
        caplog: pytest.LogCaptureFixture) -> None:
    """DNS hiccups must not close streams to live replicas: the last addresses stay; one
    warning while the name fails, not one per look; a later answer replaces them."""
    answers: list[tuple[str, ...] | OSError] = [
        ("10.0.0.7", "10.0.0.8"), OSError("Name or service not known"),
        OSError("Name or service not known"), ("10.0.0.9",)]
    asked: list[tuple[str, int]] = []

    async def resolver(host: str, port: int) -> tuple[str, ...]:
        asked.append((host, port))
        answer = answers.pop(0)
        if isinstance(answer, OSError):
            raise answer
        return answer

    names = Names(["podway-xds:18000", "10.0.0.1:18000", "unix:/x"], resolver=resolver)
    assert names.names == ("podway-xds:18000",)
    assert dict(await names.refresh()) == {"podway-xds:18000": ("10.0.0.7", "10.0.0.8")}
    with caplog.at_level(logging.WARNING):
        assert dict(await names.refresh()) == {"podway-xds:18000": ("10.0.0.7", "10.0.0.8")}
        assert dict(await names.refresh()) == {"podway-xds:18000": ("10.0.0.7", "10.0.0.8")}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "podway-xds does not resolve" in warnings[0]
    assert "keeping 10.0.0.7, 10.0.0.8" in warnings[0]
    assert dict(await names.refresh()) == {"podway-xds:18000": ("10.0.0.9",)}
    assert asked == [("podway-xds", 18000)] * 4
