"""``podway agent`` flag validation happens before anything touches the cluster or kernel."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from podway.commands import register


def app() -> typer.Typer:
    made = typer.Typer()
    register(made)
    return made


@pytest.mark.parametrize(("args", "complaint"), [
    (["agent"], "--node-name"),
    (["agent", "--node-name", "n", "--port-range", "61000-70000"], "--port-range"),
    (["agent", "--node-name", "n", "--port-range", "62000-61000"], "--port-range"),
    (["agent", "--node-name", "n", "--rules", "ebpf"], "--rules"),
])
def test_bad_flags_exit_with_usage_error(args: list[str], complaint: str) -> None:
    """Missing node name, a bad port range or backend exit 2 naming the flag."""
    result = CliRunner().invoke(app(), args, env={"NODE_NAME": ""})
    assert result.exit_code == 2
    assert complaint in result.output


def test_cleanup_is_a_subcommand() -> None:
    """``podway agent cleanup --help`` works without --node-name."""
    result = CliRunner().invoke(app(), ["agent", "cleanup", "--help"])
    assert result.exit_code == 0
    assert "Remove every kernel rule" in result.output
