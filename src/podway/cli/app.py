"""The ``podway`` command line: one typer app, one sub-command per job.

Each job lives in its own module; this file only wires them together so that the layers below
never import the CLI. It is also where failures a user can act on (any ``PodwayError``, OS errors
such as a port in use) become one ``error:`` line and exit status 2; ``--log-level debug`` adds
the traceback. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import logging
import sys
import traceback

import typer

from podway import __version__

app = typer.Typer(
    name="podway",
    help="North-south load balancing for Kubernetes, straight to the pods.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.command()
def version() -> None:
    """Print Podway's version."""
    typer.echo(__version__)


def main() -> None:
    from podway.base import collector
    from podway.cli.commands import early, register

    early.start(sys.argv[1:])  # before the command's imports: see podway.cli.commands.early
    # Only the sub-command that runs is imported; imports make no cyclic garbage, and the
    # collections their allocations set off were ~10 % of `podway run`'s import time.
    with collector.paused():
        register(app, sys.argv[1:])
    try:
        app()
    except (Exception, ExceptionGroup) as exc:
        lines = explained(exc)
        if lines is None:
            raise
        if logging.getLogger().isEnabledFor(logging.DEBUG):
            traceback.print_exception(exc)
        for line in lines:
            typer.echo(f"error: {line}", err=True)
        raise SystemExit(2) from None


def explained(exc: BaseException) -> list[str] | None:
    """One line per failure when every failure in ``exc`` is one a user can act on: our own
    ``PodwayError``s, and OS errors of the environment (a port in use, a missing file). None for
    anything else — a bug keeps its traceback."""
    from podway.base.errors import PodwayError

    if isinstance(exc, BaseExceptionGroup):
        out: list[str] = []
        for inner in exc.exceptions:
            lines = explained(inner)
            if lines is None:
                return None
            out.extend(lines)
        return out
    if isinstance(exc, PodwayError | OSError):
        return [str(exc)]
    return None
