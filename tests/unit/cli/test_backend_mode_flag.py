"""One backend-mode flag name in every command: ``--backend-mode``; ``--mode`` is a hidden alias
that still works and warns in one line."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from podway.base.errors import ConfigError
from podway.cli.app import app
from podway.cli.commands import register
from podway.cli.commands.common import backend_mode_flag
from podway.translate import BackendMode
from tests.unit.cli.test_errors import QUICKSTART, one_error_line, podway

register(app)
runner = CliRunner()
COMMANDS = (("run",), ("validate",), ("explain",), ("diagram",), ("config", "dump"),
            ("controller",))
WARNING = "warning: --mode is deprecated; use --backend-mode"


def command_of(path: tuple[str, ...]) -> Any:
    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return command


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_command_names_it_backend_mode_and_hides_the_old_name(
        path: tuple[str, ...]) -> None:
    """Each command that takes a backend mode shows --backend-mode and hides --mode."""
    options = {opt: param for param in command_of(path).params for opt in param.opts}
    assert not options["--backend-mode"].hidden
    assert options["--mode"].hidden


def test_the_defaults_stay_per_command() -> None:
    """No flag: the command's own default (standalone has no agent, so clusterip)."""
    assert backend_mode_flag(None, None, default=BackendMode.CLUSTERIP) is BackendMode.CLUSTERIP
    assert backend_mode_flag(None, None, default=BackendMode.NODEPORTLOCAL) is \
        BackendMode.NODEPORTLOCAL
    assert backend_mode_flag(BackendMode.NODEPORT, None, default=BackendMode.CLUSTERIP) is \
        BackendMode.NODEPORT


def test_both_names_disagreeing_is_refused() -> None:
    """--mode X --backend-mode Y with X != Y: which one was meant is unknown, so refuse."""
    with pytest.raises(ConfigError, match="disagree"):
        backend_mode_flag(BackendMode.NODEPORT, BackendMode.CLUSTERIP,
                          default=BackendMode.CLUSTERIP)


@pytest.mark.parametrize("flag", ["--backend-mode", "--mode"])
def test_both_names_reach_the_translator(flag: str) -> None:
    """nodeport on the quickstart's ClusterIP Services is refused by the translator, under
    either name; only the old name warns, in one line."""
    result = runner.invoke(app, ["validate", flag, "nodeport", QUICKSTART],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    assert "nodeport mode needs type NodePort" in result.output
    assert (WARNING in result.output) == (flag == "--mode")
    assert result.output.count("deprecated") == (flag == "--mode")


def test_disagreeing_names_are_one_error_line() -> None:
    """The refusal is the usual one ``error:`` line, exit status 2 (after the warning)."""
    result = podway("validate", "--mode", "nodeport", "--backend-mode", "clusterip", QUICKSTART)
    assert result.stderr.startswith(WARNING + "\n")
    result.stderr = result.stderr.removeprefix(WARNING + "\n")
    assert "disagree" in one_error_line(result)
