"""``--xff-trusted-hops``: a bad count stops the command with one line."""

from __future__ import annotations

import pytest

from tests.unit.cli.test_errors import QUICKSTART, one_error_line, podway


@pytest.mark.parametrize("args", [
    ["validate", "--xff-trusted-hops", "-1", QUICKSTART],
    ["validate", "--xff-trusted-hops", "17", QUICKSTART],
    ["run", "--manifests", QUICKSTART, "--xff-trusted-hops", "99"],
    ["echo", "--proxy-protocol"]])
def test_bad_client_ip_flags_are_one_line(args: list[str]) -> None:
    line = one_error_line(podway(*args))
    assert "--xff-trusted-hops" in line or "--proxy-protocol" in line


def test_validate_shows_the_hops_in_the_ir() -> None:
    result = podway("validate", "--ir", "--xff-trusted-hops", "3", QUICKSTART)
    assert result.returncode == 0, result.stderr
    assert "xff_trusted_hops: 3" in result.stdout


def test_validate_shows_real_ip_only_when_asked() -> None:
    """X-Real-IP costs every request: off by default, on every HTTP(S) listener with the flag."""
    plain = podway("validate", "--ir", QUICKSTART)
    assert plain.returncode == 0, plain.stderr
    assert "real_ip" not in plain.stdout
    asked = podway("validate", "--ir", "--x-real-ip", QUICKSTART)
    assert asked.returncode == 0, asked.stderr
    assert "real_ip: true" in asked.stdout
