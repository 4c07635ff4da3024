"""Sub-commands of the ``podway`` CLI, each in a module of its own, named as the command.

Only the sub-command that runs is imported: a serving process (``podway controller``, ``podway
agent``) holds none of the other commands' modules (for the controller, 2.4 MiB of resident
memory: rich's console and tables, the file source, the render and explain helpers;
``bench/controller_memory.py``), and ``podway --help`` stays quick.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import typer

#: Every sub-command, in the order ``podway --help`` lists them; each is the name of its module.
COMMANDS = ("validate", "run", "demo", "echo", "engine", "kernel", "agent", "explain", "diagram",
            "status",
            "config", "controller", "lab", "vip", "migrate")


def register(app: typer.Typer, argv: Sequence[str] | None = None) -> None:
    """Attach sub-commands to ``app``: only the one ``argv`` (the command line after the
    program name) starts with, or every one when it names none (``--help``, no arguments, a
    mistyped name: typer then lists them all)."""
    named = argv[0] if argv else None
    for name in (named,) if named in COMMANDS else COMMANDS:
        importlib.import_module(f"podway.cli.commands.{name}").register(app)
