"""``podway controller`` loads no module it does not use while serving a cluster without TLS:
each costs resident memory in every replica (issue 11: ≤ 150 MiB at 1,000 routes; the split is
in docs/performance.md, "Controller memory"). The X.509 library loads at the first certificate
to check, kubernetes-asyncio's unused sub-packages (and what they import) never."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"

#: Loaded only when used: the X.509 library (TLS Secrets), kubernetes-asyncio's dynamic client
#: with kubernetes-validate and jsonschema (present in dev installs), and pydoc (its watch).
DEFERRED = ("cryptography", "kubernetes_validate", "jsonschema", "pydoc",
            "kubernetes_asyncio.dynamic.client", "kubernetes_asyncio.watch.watch")

CONTROLLER_IMPORTS = """
import sys
import typer
from podway.commands import register
register(typer.Typer())  # every sub-command's imports, as `podway` makes them
import podway.controller.main
print(" ".join(sorted(m for m in sys.modules if m.split(".")[0] in {deferred} or m in {deferred})))
"""


def loaded_by_the_controller_command() -> list[str]:
    code = CONTROLLER_IMPORTS.format(deferred=set(DEFERRED))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)})
    return done.stdout.split()


def test_the_controller_command_imports_none_of_the_deferred_modules() -> None:
    assert loaded_by_the_controller_command() == []


def test_a_tls_secret_still_gets_its_pair_checked() -> None:
    """Deferred, not gone: the first pair to check loads the library and checks it."""
    code = ("import sys; from podway.translate import tls;"
            "print('cryptography' in sys.modules);"
            "print(tls._check_pair(b'x', b'y').error);"
            "print(tls._valid_bundle('x'), 'cryptography' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)})
    assert done.stdout.splitlines() == ["False", "tls.crt holds no valid PEM certificate",
                                        "False True"]
