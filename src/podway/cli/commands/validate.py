"""``podway validate``: load manifests, translate them, show problems and what would be served.

Exit status 1 when any manifest fails to load or any object has an error-level problem; 2 when
the command itself cannot do its job (a bad flag, an unwritable ``--status-file``). Objects
Podway does not take (another class, …) are listed with the reason; they are not errors.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from podway.base.errors import ConfigError
from podway.cli.commands.common import (
    backend_mode_flag,
    check_address,
    check_classes,
    check_hops,
    check_nginx_config,
    check_output,
    check_port,
    stdout_console,
    tls_flags,
)
from podway.cli.commands.flags import (
    BackendModeFlag,
    IngressClasses,
    ManifestAddresses,
    NginxConfigFlag,
    OldModeFlag,
    RealIpHeader,
    StrictHostOwnership,
    TlsCiphers,
    TlsMaxVersion,
    TlsMinVersion,
    XffTrustedHops,
)
from podway.ir.dump import dump_yaml, to_data, to_yaml
from podway.model import Snapshot
from podway.readers.render.statuses import not_owned_table, status_table
from podway.readers.render.table import served_table
from podway.sources.files import load_paths
from podway.status import build
from podway.status.file import write_atomic
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
    backend_mode: BackendModeFlag = None,
    mode: OldModeFlag = None,
    status_file: Annotated[Path | None, typer.Option(
        help="Write the status document (as `run --status-file`, see docs/run.md) here.")]
    = None,
    manifest_addresses: ManifestAddresses = False,
    strict_host_ownership: StrictHostOwnership = False,
    ingress_class: IngressClasses = None,
    nginx_config: NginxConfigFlag = None,
    xff_trusted_hops: XffTrustedHops = 0,
    x_real_ip: RealIpHeader = False,
    tls_min_version: TlsMinVersion = None,
    tls_max_version: TlsMaxVersion = None,
    tls_ciphers: TlsCiphers = None,
    output: Annotated[str | None, typer.Option(
        "-o", "--output", help="json: the IR and the status document as one JSON document "
        "instead of the tables.")] = None,
) -> None:
    """Load manifests, translate them and report every problem; show what would be served."""
    as_json = check_output("-o", output) == "json"
    check_address("--address", address)
    check_port("--http-port", http_port)
    check_port("--https-port", https_port)
    out = stdout_console()
    err = Console(stderr=True)
    loaded = load_paths(paths)
    # oidc_key: any key stands in for the one a serving Podway makes (OIDC is then judged
    # as it would be served; the key itself is never shown)
    opts = TranslateOptions(address=address, http_port=http_port, https_port=https_port,
                            oidc_key=os.urandom(32), mode=backend_mode_flag(backend_mode, mode,
                                                   default=BackendMode.CLUSTERIP),
                            manifest_addresses=manifest_addresses,
                            strict_host_ownership=strict_host_ownership,
                            takeover_classes=check_classes("--ingress-class", ingress_class),
                            tls=tls_flags(tls_min_version, tls_max_version, tls_ciphers),
                            real_ip_header=x_real_ip,
                            nginx=check_nginx_config("--nginx-config", nginx_config),
                            xff_trusted_hops=check_hops("--xff-trusted-hops",
                                                        xff_trusted_hops))
    snapshot = Snapshot.of_objects(loaded.objects)
    result = translate(snapshot, opts)
    document = build(snapshot=snapshot, result=result, load_errors=loaded.errors,
                     load_warnings=loaded.warnings)
    for error in loaded.errors:
        err.print(f"[red]error[/red] {escape(str(error))}", highlight=False, soft_wrap=True)
    for warning in loaded.warnings:
        err.print(f"[yellow]warning[/yellow] {escape(str(warning))}", highlight=False,
                  soft_wrap=True)
    for problem in result.problems:
        color = {Severity.ERROR: "red", Severity.WARNING: "yellow"}.get(problem.severity, "cyan")
        at = f" ({problem.field})" if problem.field else ""
        text = escape(f"{problem.ref} {problem.reason}: {problem.message}{at}")
        err.print(f"[{color}]{problem.severity}[/{color}] {text}", highlight=False,
                  soft_wrap=True)
    if as_json:
        typer.echo(json.dumps({"ir": to_data(result.ir),
                               "status": document.to_data(updated=None)},
                              indent=2, sort_keys=True, default=str))
    elif ir:
        out.print(to_yaml(result.ir), end="", markup=False, highlight=False, soft_wrap=True)
    else:
        out.print(served_table(result.ir))
        if document.statuses:
            out.print(status_table(document.statuses))
        if document.not_owned:
            out.print(not_owned_table(document.not_owned))
        errors = len(loaded.errors) + sum(p.severity is Severity.ERROR for p in result.problems)
        warnings = sum(p.severity is Severity.WARNING for p in result.problems)
        skipped = f", {len(document.not_owned)} not Podway's" if document.not_owned else ""
        out.print(f"{len(loaded.objects)} objects, {len(result.ir.listeners)} listeners, "
                  f"{len(result.ir.pools)} pools; {errors} errors, {warnings} warnings{skipped}")
    if status_file is not None:
        failure = write_atomic(status_file, dump_yaml(document.to_data()))
        if failure is not None:
            raise ConfigError(failure)
    if loaded.errors or result.has_errors:
        raise typer.Exit(1)
