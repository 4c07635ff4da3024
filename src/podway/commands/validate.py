"""``podway validate``: load manifests, translate them, show problems and what would be served."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from podway.model.loader import load_paths


def register(app: typer.Typer) -> None:
    app.command()(validate)


def validate(
    paths: Annotated[list[Path], typer.Argument(help="Manifest files or folders.", exists=True)],
) -> None:
    """Load manifests and report every problem found."""
    console = Console()
    loaded = load_paths(paths)
    for error in loaded.errors:
        console.print(f"[red]error[/red] {error}", highlight=False)
    console.print(f"{len(loaded.objects)} objects loaded, {len(loaded.errors)} errors")
    if loaded.errors:
        raise typer.Exit(1)
