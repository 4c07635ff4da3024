"""Sub-commands of the ``podway`` CLI, each in a module of its own."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach every sub-command to ``app``; imports stay lazy so ``podway --help`` is quick."""
    from podway.commands import (
        agent,
        config,
        controller,
        demo,
        diagram,
        echo,
        engine,
        explain,
        lab,
        migrate,
        run,
        status,
        validate,
        vip,
    )

    validate.register(app)
    run.register(app)
    demo.register(app)
    echo.register(app)
    engine.register(app)
    agent.register(app)
    explain.register(app)
    diagram.register(app)
    status.register(app)
    config.register(app)
    controller.register(app)
    lab.register(app)
    vip.register(app)
    migrate.register(app)
