"""``podway controller`` loads no module it does not use while serving a cluster without TLS
or regular expressions: each costs resident memory in every replica (issue 11: ≤ 150 MiB at
1,000 routes; the split is in docs/performance.md, "Controller memory"). The X.509 library
loads at the first certificate to check, RE2 at the first regular expression;
kubernetes-asyncio's unused sub-packages (and what they import) and the other sub-commands'
modules (rich's console and tables among them) never."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import typer

from podway.cli.commands import COMMANDS, register

SRC = Path(__file__).resolve().parents[3] / "src"

#: Loaded only when used: the X.509 library (TLS Secrets), RE2 (regular expressions in routes
#: or annotations), kubernetes-asyncio's dynamic client
#: with kubernetes-validate and jsonschema (present in dev installs), pydoc (its watch), rich
#: (the other commands' output) and the other commands' modules.
DEFERRED = ("cryptography", "re2", "kubernetes_validate", "jsonschema", "pydoc", "rich",
            "kubernetes_asyncio.dynamic.client", "kubernetes_asyncio.watch.watch",
            *(f"podway.cli.commands.{name}" for name in COMMANDS if name != "controller"))

# The command as a user starts it (an unreadable kubeconfig ends it before any connection),
# then the modules it serves with.
CONTROLLER = """
import sys
sys.argv = ["podway", "controller", "--kubeconfig", "/nonexistent/kubeconfig"]
from podway.cli.app import main
try:
    main()
except SystemExit as exc:
    assert exc.code == 2, exc.code
import podway.programs.controller.main
print(" ".join(sorted(m for m in sys.modules if m.split(".")[0] in {deferred} or m in {deferred})))
"""


def run(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)})
    return done.stdout.splitlines()


def test_the_controller_command_imports_none_of_the_deferred_modules() -> None:
    assert run(CONTROLLER.format(deferred=set(DEFERRED))) == [""]


def test_only_the_sub_command_that_runs_is_registered() -> None:
    """``podway controller …`` registers the controller alone; no name (``--help``) or one
    that is no command registers them all, so typer lists them or suggests the nearest."""
    def names(argv: list[str]) -> set[str]:
        app = typer.Typer()
        register(app, argv)
        return ({c.name or (c.callback.__name__ if c.callback else "") for c in
                 app.registered_commands}
                | {g.name or (g.typer_instance.info.name if g.typer_instance else "") or ""
                   for g in app.registered_groups})

    assert names(["controller", "--kubeconfig", "k"]) == {"controller"}
    assert names(["lab", "up"]) == {"lab"}
    everything = names([])
    assert names(["--help"]) == names(["contrller"]) == everything
    assert len(everything) == len(COMMANDS)


def test_a_tls_secret_still_gets_its_pair_checked() -> None:
    """Deferred, not gone: the first pair to check loads the library and checks it."""
    assert run("import sys; from podway.translate.core import tls;"
               "print('cryptography' in sys.modules);"
               "print(tls._check_pair(b'x', b'y').error);"
               "print(tls._valid_bundle('x'), 'cryptography' in sys.modules)") == [
        "False", "tls.crt holds no valid PEM certificate", "False True"]


def test_a_regex_still_gets_checked_and_matched() -> None:
    """Deferred, not gone: RE2 loads at the first pattern, checks it and matches with it."""
    assert run("import sys; from podway.translate.core.regex import re2_problem;"
               "from podway.ir.evaluate import _fullmatch;"
               "print('re2' in sys.modules);"
               "print(re2_problem('(?=x)') is not None, re2_problem('a+') is None);"
               "print(_fullmatch('a+b', 'aab'), _fullmatch('(', 'x'))") == [
        "False", "True True", "True False"]
