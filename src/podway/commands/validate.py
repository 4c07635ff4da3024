"""``podway validate``: load manifests, translate them, show problems and what would be served.

Exit status 1 when any manifest fails to load or any object has an error-level problem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from podway.ir.dump import dump_yaml, to_yaml
from podway.model import Snapshot
from podway.model.loader import load_paths
from podway.render.statuses import status_table
from podway.render.table import served_table
from podway.translate import BackendMode, Severity, TranslateOptions, translate
from podway.translate.status import statuses_to_api


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
    status_file: Annotated[Path | None, typer.Option(
        help="Write the status of every object Podway owns (Gateway API) to this YAML file.")]
    = None,
    manifest_addresses: Annotated[bool, typer.Option(
        "--manifest-addresses", help="Bind the VIPs and Gateway addresses manifests name "
        "(default: every listener binds --address).")] = False,
    strict_host_ownership: Annotated[bool, typer.Option(
        "--strict-host-ownership", help="Refuse rules for a host another namespace's older "
        "Ingress owns (default: serve them and warn both).")] = False,
) -> None:
    """Load manifests, translate them and report every problem; show what would be served."""
    out = Console()
    err = Console(stderr=True)
    loaded = load_paths(paths)
    opts = TranslateOptions(address=address, http_port=http_port, https_port=https_port,
                            mode=mode, manifest_addresses=manifest_addresses,
                            strict_host_ownership=strict_host_ownership)
    result = translate(Snapshot.of_objects(loaded.objects), opts)
    for error in loaded.errors:
        err.print(f"[red]error[/red] {escape(str(error))}", highlight=False, soft_wrap=True)
    for problem in result.problems:
        color = "red" if problem.severity is Severity.ERROR else "yellow"
        at = f" ({problem.field})" if problem.field else ""
        text = escape(f"{problem.ref} {problem.reason}: {problem.message}{at}")
        err.print(f"[{color}]{problem.severity}[/{color}] {text}", highlight=False,
                  soft_wrap=True)
    if ir:
        out.print(to_yaml(result.ir), end="", markup=False, highlight=False, soft_wrap=True)
    else:
        out.print(served_table(result.ir))
        if result.statuses:
            out.print(status_table(result.statuses))
        errors = len(loaded.errors) + sum(p.severity is Severity.ERROR for p in result.problems)
        warnings = sum(p.severity is Severity.WARNING for p in result.problems)
        out.print(f"{len(loaded.objects)} objects, {len(result.ir.listeners)} listeners, "
                  f"{len(result.ir.pools)} pools; {errors} errors, {warnings} warnings")
    if status_file is not None:
        status_file.write_text(dump_yaml(statuses_to_api(result.statuses)), encoding="utf-8")
    if loaded.errors or result.has_errors:
        raise typer.Exit(1)
