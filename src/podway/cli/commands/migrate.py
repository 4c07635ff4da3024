"""``podway migrate``: move from ingress-nginx with proof (``compare``) and a way out of
annotations (``to-gateway``). See docs/migrate-from-ingress-nginx.md.

``compare`` exits 0 when both sides answered every request alike, 1 when anything differs, 2 when
it cannot do its job (a bad flag, an unreadable file: one ``error:`` line).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from podway.base.errors import ConfigError
from podway.cli.commands.flags import NginxConfigFlag

if TYPE_CHECKING:
    from podway.model.base import K8sObject
    from podway.tools.migrate.probes import Probe
    from podway.tools.migrate.replay import EntryPoint

migrate_app = typer.Typer(name="migrate", no_args_is_help=True,
                          help="Move from ingress-nginx (compare two entry points, convert "
                          "Ingresses to Gateway API) or from MetalLB (its pools as VIPPools).")


def register(app: typer.Typer) -> None:
    app.add_typer(migrate_app)


@migrate_app.command()
def compare(
    old: Annotated[list[str], typer.Option(
        help="The old entry point: http://HOST[:PORT] and/or https://HOST[:PORT] (repeat for "
        "both).")],
    new: Annotated[list[str], typer.Option(help="The new entry point, as --old.")],
    requests: Annotated[Path | None, typer.Option(
        help="Access log to sample: nginx combined lines and/or JSON lines.")] = None,
    from_manifests: Annotated[Path | None, typer.Option(
        help="Manifests whose Ingresses and HTTPRoutes give the requests (every host x path "
        "x method).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    method: Annotated[list[str] | None, typer.Option(
        help="Methods for generated requests (repeat; default GET and POST).")] = None,
    sample: Annotated[int, typer.Option(help="At most this many distinct log requests.")]
    = 200,
    seed: Annotated[int, typer.Option(help="Seed of the log sample (same seed, same set).")]
    = 0,
    log_host: Annotated[str, typer.Option(
        help="Host for combined log lines (they do not record one).")] = "",
    backend_header: Annotated[str, typer.Option(
        help="Response header naming the backend (default: the echo server's body).")] = "",
    upstream_header: Annotated[list[str] | None, typer.Option(
        help="Request header the backend saw to compare (echo backends; repeat; default "
        "x-forwarded-prefix and x-forwarded-proto).")] = None,
    ignore_header: Annotated[list[str] | None, typer.Option(
        help="Response header not to compare (repeat).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for each answer.")] = 10.0,
    concurrency: Annotated[int, typer.Option(
        help="Requests in flight at once (both sides together).")] = 8,
) -> None:
    """Replay a request set against the old and the new entry point; print what differs."""
    from podway.tools.migrate import probes as probe_set
    from podway.tools.migrate.compare import run
    from podway.tools.migrate.replay import DEFAULT_UPSTREAM_HEADERS, EntryPoint, ReplayOptions

    if requests is None and from_manifests is None:
        raise ConfigError("give --from-manifests DIR, --requests FILE or both")
    if sample < 0 or timeout <= 0 or concurrency < 1:
        raise ConfigError("--sample must be >= 0, --timeout > 0 and --concurrency >= 1")
    sides = EntryPoint.parse("old", old), EntryPoint.parse("new", new)
    methods = tuple(m.upper() for m in method or probe_set.DEFAULT_METHODS)
    probes: list[Probe] = []
    if from_manifests is not None:
        probes.extend(probe_set.from_objects(_load(from_manifests), methods=methods))
    if requests is not None:
        probes.extend(_log_probes(requests, log_host=log_host, sample=sample, seed=seed))
    kept, warnings = replayable(probes, sides)
    for line in warnings:
        typer.echo(f"warning: {line}", err=True)
    if not kept:
        raise ConfigError("no requests to replay")
    opts = ReplayOptions(
        backend_header=backend_header, timeout_s=timeout, concurrency=concurrency,
        upstream_headers=tuple(h.lower() for h in upstream_header or DEFAULT_UPSTREAM_HEADERS),
        ignore_headers=frozenset(h.lower() for h in ignore_header or ()))
    report = asyncio.run(run(kept, old=sides[0], new=sides[1], opts=opts))
    if json_out:
        typer.echo(json.dumps(report.to_data(), indent=2))
    else:
        for line in report.to_text():
            typer.echo(line)
    if report.differs:
        raise typer.Exit(1)


def replayable(probes: list[Probe], sides: tuple[EntryPoint, EntryPoint]
               ) -> tuple[list[Probe], list[str]]:
    """The probes to send (each request once, only schemes both sides serve) and a warning per
    scheme left out for want of an entry point. A repeated request is sent once and is no
    reason to warn: it was not skipped."""
    from podway.tools.migrate import probes as probe_set

    once = probe_set.unique(probes)
    kept = [p for p in once if all(side.address(p.scheme) is not None for side in sides)]
    warnings = []
    for scheme in ("http", "https"):
        dropped = sum(p.scheme == scheme for p in once) - sum(p.scheme == scheme for p in kept)
        if dropped:
            warnings.append(f"{dropped} {scheme} requests skipped: give both --old and --new "
                            f"a {scheme}:// entry point")
    return kept, warnings


def _load(path: Path) -> list[K8sObject]:
    from podway.sources.files import load_paths

    if not path.exists():
        raise ConfigError(f"{path}: no such file or folder")
    loaded = load_paths([path])
    for error in loaded.errors:
        typer.echo(f"warning: {error}", err=True)
    return list(loaded.objects)


def _log_probes(path: Path, *, log_host: str, sample: int, seed: int) -> tuple[Probe, ...]:
    from podway.tools.migrate.probes import parse_log
    from podway.tools.migrate.probes import sample as pick

    try:
        with path.open(encoding="utf-8", errors="replace") as lines:  # line by line: logs are big
            parsed = parse_log(lines, default_host=log_host, source=str(path))
    except OSError as error:
        raise ConfigError(f"--requests {path}: {error.strerror or error}") from None
    if parsed.skipped:
        count = parsed.skipped_count
        more = f" (and {count - 1} more)" if count > 1 else ""
        typer.echo(f"warning: {count} lines not used: {parsed.skipped[0]}{more}", err=True)
    if not parsed.probes:
        raise ConfigError(f"--requests {path}: no usable request lines")
    return pick(parsed.probes, sample, seed=seed)


@migrate_app.command("to-gateway")
def to_gateway(
    source: Annotated[str, typer.Argument(
        help="Manifest file or folder with the Ingresses (and their Services), or - for "
        "stdin.")],
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write the YAML here instead of stdout.")] = None,
    gateway_name: Annotated[str, typer.Option(help="Name of the Gateway.")] = "ingress-nginx",
    gateway_namespace: Annotated[str, typer.Option(
        help="Namespace of the Gateway (default: the Ingresses' if they share one, else "
        "default).")] = "",
    gateway_class: Annotated[str, typer.Option(
        help="GatewayClass to create and use (controller podway.io/gateway-controller).")]
    = "podway",
    http_port: Annotated[int, typer.Option(help="Port of the Gateway's HTTP listener.")] = 80,
    https_port: Annotated[int, typer.Option(help="Port of its HTTPS listeners.")] = 443,
    nginx_config: NginxConfigFlag = None,
) -> None:
    """Convert Ingresses (with nginx annotations) into a Gateway and HTTPRoutes; report each
    annotation that could not be carried over (on stderr)."""
    import sys

    from podway.cli.commands.common import check_nginx_config, check_port
    from podway.model import Ingress
    from podway.model.base import DNS_SUBDOMAIN
    from podway.model.loader import load_text
    from podway.tools.migrate.to_gateway import ConvertOptions, convert, dump

    check_port("--http-port", http_port)
    check_port("--https-port", https_port)
    if http_port == https_port:
        raise ConfigError("--http-port and --https-port must differ")
    import re

    for flag, value in (("--gateway-name", gateway_name), ("--gateway-class", gateway_class),
                        ("--gateway-namespace", gateway_namespace or "default")):
        if not re.match(DNS_SUBDOMAIN, value):
            raise ConfigError(f"{flag} {value!r} is not a Kubernetes name")
    if source == "-":
        loaded = load_text(sys.stdin.read(), source="<stdin>")
        objects = list(loaded.objects)
        for error in loaded.errors:
            typer.echo(f"warning: {error}", err=True)
    else:
        objects = _load(Path(source))
    if not any(isinstance(o, Ingress) for o in objects):
        raise ConfigError(f"no Ingress in {'stdin' if source == '-' else source}")
    result = convert(objects, ConvertOptions(
        gateway_name=gateway_name, gateway_namespace=gateway_namespace,
        gateway_class=gateway_class, http_port=http_port, https_port=https_port,
        nginx=check_nginx_config("--nginx-config", nginx_config)))
    _emit(dump(result.objects), output, result.notes)
    typer.echo(f"{len(result.objects)} objects; {len(result.notes)} things not carried over"
               + (" (listed above)" if result.notes else ""), err=True)


@migrate_app.command("from-metallb")
def from_metallb(
    source: Annotated[Path, typer.Argument(
        help="MetalLB's configuration: a YAML file (IPAddressPool, BGPPeer, BGPAdvertisement, "
        "L2Advertisement, Community, BFDProfile).")],
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write the YAML here instead of stdout.")] = None,
) -> None:
    """Print MetalLB's IPAddressPools as Podway VIPPools (the same addresses) and, on stderr,
    what else Podway does differently (BGP is set per engine host with podway vip announce)."""
    import yaml

    from podway.tools.migrate.from_metallb import convert
    from podway.tools.migrate.gateway_api import dump

    try:
        text = source.read_text(encoding="utf-8")
        documents = [d for d in yaml.safe_load_all(text) if d]
    except OSError as error:
        raise ConfigError(f"{source}: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{source} does not parse: {str(error).splitlines()[0]}") from None
    items = [i for d in documents for i in (d.get("items") or [] if isinstance(d, dict)
                                            and d.get("kind", "").endswith("List") else [d])]
    result = convert(items)
    if not result.objects:
        raise ConfigError(f"no MetalLB IPAddressPool in {source}")
    _emit(dump(result.objects), output, result.notes)


def _emit(text: str, output: Path | None, notes: Sequence[object]) -> None:
    """The converted YAML to ``output`` (None: stdout), then one ``note:`` line per note on
    stderr."""
    if output is None:
        typer.echo(text, nl=False)
    else:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as error:
            raise ConfigError(f"--output {output}: {error.strerror or error}") from None
    for note in notes:
        typer.echo(f"note: {note}", err=True)
