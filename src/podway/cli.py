"""The ``podway`` command line: one typer app, one sub-command per job.

Each job lives in its own module; this file only wires them together so that the layers below
never import the CLI.
"""

from __future__ import annotations

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
    from podway.commands import register
    from podway.errors import PodwayError

    register(app)
    try:
        app()
    except PodwayError as exc:  # our own, explained failures: one line, no traceback
        typer.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
