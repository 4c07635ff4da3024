"""What sub-commands share: logging setup, flag checks and stop-on-signal.

Flag checks raise ``ConfigError`` (one line on stderr, exit status 2; see ``podway.cli.app``), so a
bad value is refused before anything starts instead of surfacing later as a traceback or a
listener that silently never appears.
"""

from __future__ import annotations

import ipaddress
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from podway.base.errors import ConfigError
from podway.ir import TLSOptions

if TYPE_CHECKING:
    from rich.console import Console

    from podway.translate import BackendMode
    from podway.translate.core.nginx_config import NginxConfig

LEVELS = ("debug", "info", "warning", "error")


def setup_logging(level: str) -> None:
    if level.lower() not in LEVELS:
        raise ConfigError(f"--log-level must be one of {', '.join(LEVELS)}, not {level!r}")
    logging.basicConfig(level=level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("grpc").setLevel(logging.WARNING)


#: The width tables are laid out in when standard output is not a terminal: wide enough that no
#: row of a real configuration is cut or folded (a pipe or a file has no width of its own).
PIPE_WIDTH = 4096


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def stdout_console() -> Console:
    """The console for a command's results on standard output.

    On a terminal, its width (tables fold to fit, as a person reading them expects). Piped or
    redirected (``| cat``, ``| grep``, a file, a test without a TTY, whatever ``COLUMNS`` says),
    tables keep their natural width, so key columns (pod names, NodePortLocal mappings, members)
    are never cut to ``…`` at 80 columns: a consumer greps whole values. Tables do not expand, so
    no line is padded to that width."""
    from rich.console import Console

    if stdout_is_terminal():
        return Console()
    return Console(width=PIPE_WIDTH, color_system=None, soft_wrap=True)


def check_output(flag: str, value: str | None, allowed: tuple[str, ...] = ("json",)) -> str | None:
    """``-o/--output``: one of ``allowed`` (machine-readable output instead of the tables)."""
    if value is None or value == "":
        return None
    if value not in allowed:
        raise ConfigError(f"{flag} must be {' or '.join(allowed)}, not {value!r}")
    return value


def check_port(flag: str, port: int, *, zero_means: str = "") -> None:
    """``port`` is a TCP/UDP port number; 0 is allowed only when ``zero_means`` says what for."""
    if port == 0 and zero_means:
        return
    if not 1 <= port <= 65535:
        allowed = f" (or 0: {zero_means})" if zero_means else ""
        raise ConfigError(f"{flag} must be a port number from 1 to 65535{allowed}, not {port}")


def check_address(flag: str, address: str) -> None:
    """``address`` is an IPv4 or IPv6 address (listeners bind it; no host names)."""
    try:
        ipaddress.ip_address(address)
    except ValueError:
        raise ConfigError(f"{flag} must be an IP address such as 127.0.0.1 or ::1, "
                          f"not {address!r}") from None


def check_loopback(flag: str, address: str, *, allow_flag: str, allowed: bool) -> None:
    """``address`` is an IP address, and a loopback one unless ``allowed`` (by ``allow_flag``):
    for servers with no authentication of their own (the dashboard)."""
    check_address(flag, address)
    if not allowed and not ipaddress.ip_address(address).is_loopback:
        raise ConfigError(f"{flag} {address} is not loopback: the page has no login and shows "
                          f"the whole configuration; add {allow_flag} to serve it there anyway")


def check_at_least(flag: str, value: float, minimum: float) -> None:
    if value < minimum:
        raise ConfigError(f"{flag} must be at least {minimum:g}, not {value:g}")


def check_hops(flag: str, value: int) -> int:
    """``--xff-trusted-hops``: a hop count the translator accepts (0..annotations.MAX_HOPS)."""
    from podway.translate.annotations import MAX_HOPS

    if not 0 <= value <= MAX_HOPS:
        raise ConfigError(f"{flag} must be 0-{MAX_HOPS} (trusted proxies in front of the "
                          f"engine), not {value}")
    return value


def check_classes(flag: str, values: list[str] | None) -> tuple[str, ...]:
    """``--ingress-class``: IngressClass names (DNS subdomains), each once."""
    import re

    out = tuple(dict.fromkeys(v.strip() for v in values or ()))
    for value in out:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", value):
            raise ConfigError(f"{flag} {value!r} is not an IngressClass name (lower-case "
                              "letters, digits, '-' and '.')")
    return out


def check_nginx_config(flag: str, values: list[str] | None) -> NginxConfig:
    """``--nginx-config KEY=VALUE``: ingress-nginx ConfigMap keys Podway serves."""
    from podway.translate.core.nginx_config import parse

    try:
        return parse(values or ())
    except ValueError as error:
        raise ConfigError(f"{flag}: {error}") from None


XFF_HELP = ("Proxies in front of the engine trusted to append to X-Forwarded-For (0: the "
            "engine is the edge, a client-sent X-Forwarded-For never names the client).")


def tls_flags(min_version: str | None, max_version: str | None,
              ciphers: str | None) -> TLSOptions:
    """``--tls-min-version``, ``--tls-max-version`` and ``--tls-ciphers``, checked as the engine
    would check them (a bad value would make it refuse every HTTPS listener)."""
    from podway.translate.core.tls_options import TLSOptionError, from_flags

    try:
        return from_flags(min_version, max_version, ciphers)
    except TLSOptionError as error:
        raise ConfigError(str(error)) from None


NPL_KEY_MIN_BYTES = 16


def read_npl_key(path: Path, flag: str = "--npl-key") -> bytes:
    """The NodePortLocal signing key in ``path`` (surrounding whitespace dropped); a missing,
    unreadable or too short file is a ``ConfigError`` naming ``flag``."""
    try:
        key = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: {exc.strerror or exc}") from None
    if len(key) < NPL_KEY_MIN_BYTES:
        raise ConfigError(f"{flag} {path}: a key of at least {NPL_KEY_MIN_BYTES} bytes is "
                          "needed (e.g. head -c 32 /dev/urandom | base64)")
    return key


def backend_mode_flag(backend_mode: BackendMode | None, mode: BackendMode | None, *,
                      default: BackendMode) -> BackendMode:
    """``--backend-mode``, or its old name ``--mode`` (hidden, warns once on stderr), else the
    command's default. Both given with different values is refused: which one was meant?"""
    import typer

    if mode is not None:
        typer.echo("warning: --mode is deprecated; use --backend-mode", err=True)
        if backend_mode is not None and backend_mode != mode:
            raise ConfigError(f"--mode {mode} and --backend-mode {backend_mode} disagree: "
                              "give --backend-mode only")
        backend_mode = mode
    return default if backend_mode is None else backend_mode
