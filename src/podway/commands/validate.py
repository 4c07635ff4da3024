"""``podway validate``: load manifests, translate them, show problems and what would be served.

Exit status 1 when any manifest fails to load or any object has an error-level problem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from podway.ir.dump import to_yaml
from podway.model import Snapshot
from podway.model.loader import load_paths
from podway.render.table import served_table
from podway.translate import BackendMode, Severity, TranslateOptions, translate


def register(app: typer.Typer) -> None:
    app.command()(validate)


def validate(
    paths: Annotated[list[Path], typer.Argument(help="Manifest files or folders.", exists=True)],
    ir: Annotated[bool, typer.Option("--ir", help="Print the IR as YAML instead of a table.")]
    = False,
    address: Annotated[str, typer.Option(help="Bind address for objects that name no VIP.")]
    = "0.0.0.0",
    http_port: Annotated[int, typer.Option(help="Port of the Ingress HTTP listener.")] = 80,
    https_port: Annotated[int, typer.Option(help="Port of the Ingress HTTPS listener.")] = 443,
    mode: Annotated[BackendMode, typer.Option(help="How Service pods become pool members.")]
    = BackendMode.CLUSTERIP,
) -> None:
    """Load manifests, translate them and report every problem; show what would be served."""
    out = Console()
    err = Console(stderr=True)
    loaded = load_paths(paths)
    opts = TranslateOptions(address=address, http_port=http_port, https_port=https_port,
                            mode=mode)
    result = translate(Snapshot.of_objects(loaded.objects), opts)
    for error in loaded.errors:
        err.print(f"[red]error[/red] {error}", highlight=False, soft_wrap=True)
    for problem in result.problems:
        color = "red" if problem.severity is Severity.ERROR else "yellow"
        at = f" ({problem.field})" if problem.field else ""
        err.print(f"[{color}]{problem.severity}[/{color}] {problem.ref} {problem.reason}: "
                  f"{problem.message}{at}", highlight=False, soft_wrap=True)
    if ir:
        out.print(to_yaml(result.ir), end="", highlight=False, soft_wrap=True)
    else:
        out.print(served_table(result.ir))
        errors = len(loaded.errors) + sum(p.severity is Severity.ERROR for p in result.problems)
        warnings = sum(p.severity is Severity.WARNING for p in result.problems)
        out.print(f"{len(loaded.objects)} objects, {len(result.ir.listeners)} listeners, "
                  f"{len(result.ir.pools)} pools; {errors} errors, {warnings} warnings")
    if loaded.errors or result.has_errors:
        raise typer.Exit(1)
