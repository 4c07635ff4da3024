"""A migration bed: the same manifests served by a real nginx configured as ingress-nginx would
be (``nginx_oracle``) and by Podway (standalone + real Envoy), echo backends behind both, and
``podway.tools.migrate.compare`` between them. Loopback only; everything stops after the block."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from podway.model.base import K8sObject
from podway.model.loader import load_text
from podway.programs.standalone import Standalone, StandaloneOptions
from podway.tools.migrate.compare import Report, run
from podway.tools.migrate.probes import Probe, from_objects
from podway.tools.migrate.replay import Address, EntryPoint, ReplayOptions
from podway.translate import TranslateOptions
from podway.translate.core.nginx_config import INGRESS_NGINX, NginxConfig
from tests.e2e.harness import Stack, echo_backend, free_port
from tests.e2e.nginx_oracle import Config, nginx

NGINX_CLASS = "nginx"


def need_nginx() -> None:
    if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        pytest.skip("nginx is not installed (Debian package nginx; ./dev installs it as root)")


def objects_of(text: str) -> list[K8sObject]:
    loaded = load_text(text)
    assert not loaded.errors, loaded.errors
    return list(loaded.objects)


@dataclass
class Bed:
    old: EntryPoint
    podway: Stack

    @property
    def new(self) -> EntryPoint:
        return entry("new", self.podway.http_port, self.podway.https_port)

    async def compare(self, probes: Sequence[Probe], *, new: EntryPoint | None = None,
                      old: EntryPoint | None = None) -> Report:
        return await run(probes, old=old or self.old, new=new or self.new,
                         opts=ReplayOptions(timeout_s=10, concurrency=4))


def entry(name: str, http: int, https: int) -> EntryPoint:
    return EntryPoint(name=name, http=Address(host="127.0.0.1", port=http),
                      https=Address(host="127.0.0.1", port=https))


async def start_backends(names: Sequence[str], tasks: list[asyncio.Task[None]]
                         ) -> dict[str, int]:
    ports: dict[str, int] = {}
    for name in names:
        port, task = await echo_backend(name)
        tasks.append(task)
        ports[name] = port
    return ports


async def podway_stack(root: Path, *, ingress_class: str = NGINX_CLASS,
                       nginx_config: NginxConfig = INGRESS_NGINX) -> Stack:
    """Standalone Podway on ``root`` taking over Ingresses of ``ingress_class`` (as
    ``--ingress-class nginx``: their nginx annotations served), started."""
    http_port, https_port = free_port(), free_port()
    standalone = Standalone(StandaloneOptions(
        manifests=root, drain_s=0, status_file=root.parent / f"{root.name}-status.yaml",
        translate=TranslateOptions(address="127.0.0.1", http_port=http_port,
                                   https_port=https_port,
                                   takeover_classes=(ingress_class,),
                                   nginx=nginx_config)))
    stack = Stack(root, http_port, https_port, standalone)
    await stack.start()
    return stack


@contextlib.asynccontextmanager
async def bed(tmp_path: Path, old_text: str, new_text: str | None = None, *,
              nginx_config: NginxConfig = INGRESS_NGINX) -> AsyncIterator[Bed]:
    """nginx serving ``old_text``, Podway serving ``new_text`` (default: the same), both with
    the controller-wide settings ``nginx_config`` (ingress-nginx's ConfigMap)."""
    need_nginx()
    folder = tmp_path / "nginx"
    folder.mkdir()
    root = tmp_path / "podway"
    root.mkdir()
    (root / "all.yaml").write_text(new_text if new_text is not None else old_text)
    config = Config(folder=folder, http_port=free_port(), https_port=free_port(),
                    nginx=nginx_config)
    stack: Stack | None = None
    try:
        async with nginx(objects_of(old_text), config):
            stack = await podway_stack(root, nginx_config=nginx_config)
            yield Bed(old=entry("old", config.http_port, config.https_port), podway=stack)
    finally:
        if stack is not None:
            await stack.stop()


def probes_of(text: str, methods: Sequence[str] = ("GET",)) -> tuple[Probe, ...]:
    return from_objects(objects_of(text), methods=methods)


def explain(report: Report) -> str:
    return "\n".join(report.to_text())
