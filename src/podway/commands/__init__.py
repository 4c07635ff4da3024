"""Sub-commands of the ``podway`` CLI, each in a module of its own."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach every sub-command to ``app``; imports stay lazy so ``podway --help`` is quick."""
    from podway.commands import agent, controller, demo, echo, engine, run, validate, vip

    validate.register(app)
    run.register(app)
    demo.register(app)
    echo.register(app)
    engine.register(app)
    agent.register(app)
    controller.register(app)
    vip.register(app)
