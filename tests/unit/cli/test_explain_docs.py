"""The docs show what runs: every `podway explain` in docs/explain.md and
docs/troubleshooting.md prints what the page says it prints."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from podway.cli.app import app
from podway.cli.commands import common, register

register(app)
ROOT = Path(__file__).parents[3]


def _examples(page: str) -> list[tuple[list[str], list[str]]]:
    """(arguments, the lines shown under them) of each `$ podway explain` in ``page`` that shows
    output (a command alone is a usage line with placeholders)."""
    text = (ROOT / "docs" / page).read_text()
    out = []
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        for chunk in re.split(r"\n(?=\$ )", block.strip("\n")):
            first, *shown = chunk.split("\n")
            if first.startswith("$ podway explain ") and any(s.strip() for s in shown):
                out.append((shlex.split(first)[2:], [s.rstrip() for s in shown if s.strip()]))
    return out


def _run(args: list[str], width: int) -> str:
    """``podway explain`` as printed on a terminal of ``width`` columns (the pages show that)."""
    cwd = os.getcwd()
    os.chdir(ROOT)  # the pages name folders relative to the repository
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(common, "stdout_is_terminal", lambda: True)
            result = CliRunner().invoke(app, args, env={"COLUMNS": str(width)})
    finally:
        os.chdir(cwd)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return "\n".join(line.rstrip() for line in result.output.splitlines())


def test_the_explain_page_shows_the_whole_report_as_printed_at_110_columns() -> None:
    examples = _examples("explain.md")
    assert examples
    for args, shown in examples:
        assert _run(args, 110).splitlines() == shown


@pytest.mark.parametrize("example", _examples("troubleshooting.md"),
                         ids=lambda e: e[0][1])
def test_troubleshooting_verdicts_are_what_explain_says(
        example: tuple[list[str], list[str]]) -> None:
    args, shown = example
    printed = _run(args, 400).splitlines()
    for line in shown:
        assert line in printed
