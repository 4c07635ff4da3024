"""Every command the docs show either runs here as written, or says why it cannot.

Commands come from README.md and docs/**.md: ```sh / ```bash blocks, the ``$ `` lines of
```console blocks, and untagged blocks made of commands. Each is matched by the first rule of
``RULES`` that fits: a rule either runs the command (``RUN``) or names the reason it is not run
here (root, a cluster, a long-running server, a running instance, a placeholder path). A command
no rule matches fails the test, so a new command in the docs is either runnable or explained.

A run command is run from a scratch folder that links the repository's ``examples``, ``docs`` and
``deploy`` (so an ``-o FILE`` lands there), with ``podway`` as the virtualenv's (the docs say to
use ``./dev shell`` or ``.venv/bin/podway``). It passes when it exits 0, or 1 where the command
reports findings by its status (``validate`` with errors, ``explain`` for a 404); never 2 (the
command could not do its job) and never a traceback.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUN = "run"
COMMAND_START = re.compile(r"^(sudo |\.venv/bin/podway|podway |\./dev|kubectl |helm |curl |nc )")


@dataclass(frozen=True)
class Command:
    page: str
    text: str


def commands() -> list[Command]:
    found: list[Command] = []
    for page in PAGES:
        text = page.read_text()
        for lang, body in re.findall(r"```(\w*)\n(.*?)```", text, re.S):
            lines = _joined(_without_heredocs(body.splitlines()))
            if lang == "console" or any(line.startswith("$ ") for line in lines):
                # a prompt marks the commands; the other lines are their output
                cmds = [line[2:] for line in lines if line.startswith("$ ")]
            elif lang in ("sh", "bash", "shell") or (lang == "" and lines and all(
                    COMMAND_START.match(line) for line in lines
                    if line.strip() and not line.startswith("#"))):
                cmds = [line for line in lines if line.strip() and not line.startswith("#")]
            else:
                continue
            for raw in cmds:
                if cmd := re.sub(r"\s+#.*$", "", raw).strip():
                    found.append(Command(str(page.relative_to(ROOT)), cmd))
    return found


def _without_heredocs(lines: list[str]) -> list[str]:
    """The lines a shell reads as commands: a here-document's body is data (YAML, nft rules)."""
    out, end = [], None
    for line in lines:
        if end is not None:
            end = None if line.strip() == end else end
            continue
        out.append(line)
        if match := re.search(r"<<-?\s*'?(\w+)'?", line):
            end = match.group(1)
    return out


def _joined(lines: list[str]) -> list[str]:
    out, buf = [], ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1].strip() + " "
            continue
        out.append((buf + line.strip()) if buf else line)
        buf = ""
    return out


def _podway_args(cmd: str) -> list[str] | None:
    """The arguments after ``podway`` (or ``.venv/bin/podway``), None for another program."""
    words = shlex.split(cmd)
    if words and words[0] in ("podway", ".venv/bin/podway"):
        return words[1:]
    return None


def _missing_path(args: list[str]) -> str | None:
    """A path argument that is a placeholder (not in the repository): ``manifests/``, ``DIR``."""
    for arg in args:
        if arg.startswith("-") or "://" in arg or "=" in arg:
            continue
        if "/" in arg or arg.isupper():
            path = ROOT / arg
            if arg.startswith(("examples/", "docs/", "deploy/")) and not path.exists():
                return None  # a path into the repository must exist: run it and fail
            if not path.exists() and not arg.endswith((".svg", ".png", ".yaml", ".dot")):
                return arg
    return None


SERVERS = ("run", "controller", "agent", "engine", "echo", "vip", "demo")
INSTANCE = ("status",)


def rule(cmd: str) -> str:
    """``RUN``, or why the command is not run by this test."""
    if cmd.startswith("sudo "):
        return "needs root (network namespaces, kernel rules): the lab and netns tests run it"
    if cmd.startswith("./dev "):
        return "the README's own commands: CI runs ./dev test; tests/e2e/test_docs.py the demo"
    first = cmd.split(maxsplit=1)[0]
    if first in ("kubectl", "helm"):
        return "needs a Kubernetes cluster (the chart is checked by tests/deploy)"
    if first in ("curl", "nc", "printf", "systemctl", "useradd", "pip", "mkdir", "nft", "ip",
                 "cat", "cp", "birdc", "openssl", "grpcurl", "ls", "cd", "export", "docker",
                 "podman"):
        return f"`{first}`: talks to a served port, or changes the host or its packages"
    if first in ("for", "done", "while", "do"):
        return "a shell loop of requests to a served port"
    args = _podway_args(cmd)
    if args is None:
        return ""  # unknown: the test fails and asks for a rule
    if not args or args[0] in ("--help", "version"):
        return RUN
    sub = args[0]
    if sub in SERVERS or (sub == "agent" and args[1:2] == ["cleanup"]):
        return f"`podway {sub}` serves until stopped (or changes the kernel)"
    if sub == "lab":
        return "`podway lab` needs root"
    if sub in INSTANCE or (sub in ("explain", "diagram", "config") and "--manifests" not in args
                           and not (sub == "diagram" and len(args) > 1
                                    and not args[1].startswith("-"))):
        return "asks a running instance (podway run) over its admin socket"
    if (placeholder := _missing_path(args[1:])) is not None:
        return f"names a placeholder ({placeholder})"
    if sub in ("validate", "explain", "diagram", "config", "migrate"):
        return RUN
    return ""


CASES = commands()


def test_the_docs_show_commands() -> None:
    assert len(CASES) > 50
    assert any(rule(c.text) == RUN for c in CASES)


@pytest.mark.parametrize("command", CASES, ids=lambda c: f"{c.page}:{c.text[:60]}")
def test_every_doc_command_runs_or_says_why_not(command: Command, tmp_path: Path) -> None:
    verdict = rule(command.text)
    assert verdict, (f"{command.page}: `{command.text}` matches no rule: make it runnable here "
                     "or add the reason it cannot run to tests/unit/test_doc_commands.py")
    if verdict != RUN:
        return  # the reason is the rule's text; nothing to run
    for name in ("examples", "docs", "deploy"):
        (tmp_path / name).symlink_to(ROOT / name)
    args = _podway_args(command.text)
    assert args is not None
    done = subprocess.run([sys.executable, "-m", "podway", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "COLUMNS": "80"})
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 1), (f"{command.page}: `{command.text}` exited "
                                       f"{done.returncode}: {done.stderr.strip()[-500:]}")
