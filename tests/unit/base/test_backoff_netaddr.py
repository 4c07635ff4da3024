"""The one retry policy and the one host:port parser."""

from __future__ import annotations

import pytest

from podway.base.backoff import Backoff
from podway.base.errors import ConfigError
from podway.base.netaddr import HostPort, format_host_port, parse_host_port


def test_backoff_doubles_up_to_cap_without_jitter() -> None:
    """Delays double per failure and stop at the cap; no failure, no wait."""
    backoff = Backoff(base=0.1, cap=1.0, jitter=0)
    assert [backoff.delay(n) for n in (0, 1, 2, 3, 4, 5, 10_000)] == [
        0.0, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_backoff_jitter_stays_within_its_band_and_below_the_cap() -> None:
    """Jitter takes at most ``jitter`` of each step off and never pushes past the cap."""
    low = Backoff(base=1.0, cap=4.0, jitter=0.25, rand=lambda: 1.0)
    high = Backoff(base=1.0, cap=4.0, jitter=0.25, rand=lambda: 0.0)
    assert low.delay(2) == 1.5
    assert high.delay(2) == 2.0
    assert high.delay(50) == 4.0


def test_backoff_honours_retry_after_as_a_lower_bound_with_a_cap() -> None:
    """Retry-After is never undercut; a huge one is capped; a small one leaves the step."""
    backoff = Backoff(base=0.2, cap=30.0, jitter=0, retry_after_cap=60.0)
    assert backoff.delay(1, retry_after=5) == 5.0
    assert backoff.delay(1, retry_after=86_400) == 60.0
    assert backoff.delay(8, retry_after=1) == 25.6
    assert backoff.delay(0, retry_after=2) == 2.0


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:80", HostPort("127.0.0.1", 80)),
    ("[::1]:9464", HostPort("::1", 9464)),
    ("example.com:0", HostPort("example.com", 0)),
    (":18000", HostPort("0.0.0.0", 18000)),
])
def test_parse_host_port(text: str, expected: HostPort) -> None:
    """IPv4, bracketed IPv6, names and an empty host with a default all parse."""
    assert parse_host_port(text, default_host="0.0.0.0") == expected


@pytest.mark.parametrize("text", ["nohost", "::1:80", "host:http", "host:70000", ":80"])
def test_parse_host_port_rejects_with_one_clear_line(text: str) -> None:
    """Bad addresses are a ConfigError naming the text (no default host for ``:80`` here)."""
    with pytest.raises(ConfigError, match="metrics address"):
        parse_host_port(text, what="metrics address")


def test_format_host_port_brackets_ipv6() -> None:
    """IPv6 hosts get brackets back; the two functions round-trip."""
    assert format_host_port("::1", 80) == "[::1]:80"
    assert str(parse_host_port("[fd00::1]:443")) == "[fd00::1]:443"
