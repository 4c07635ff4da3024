"""Standalone mode: file source + pipeline + xDS server + one supervised Envoy.

One process tree, no cluster, no root. Everything between the folder and the cache is the
``Pipeline`` (``podway.pipeline``); this module only wires it: the file source feeds it, the xDS
server serves its cache and reports engines' ACKs/NACKs back to it, and the status file is
rewritten from each state it publishes. Readers (tests, the demo, benchmarks) await states:
``standalone.pipeline.wait_for(lambda s: s.generation >= n)``.

The status file is rewritten atomically after every update: each object's problems (translator
problems and load errors), stale files served from their last good load, and engines' NACKs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from podway.engine.bootstrap import BootstrapOptions, bootstrap
from podway.engine.process import Engine, EngineOptions, find_envoy
from podway.ir.dump import dump_yaml
from podway.pipeline import Pipeline, Rejection
from podway.sources.base import SourceUpdate
from podway.sources.files import FileSource
from podway.translate import Result, TranslateOptions
from podway.translate.status import to_api
from podway.xds.protocol import Event
from podway.xds.server import ServerTLS, XdsServer

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class StandaloneOptions:
    manifests: Path
    translate: TranslateOptions = field(default_factory=TranslateOptions)
    xds_address: str = "127.0.0.1:0"  # loopback, ephemeral port; "unix:/path" works too
    xds_tls: ServerTLS | None = None
    delta: bool = True  # the engine uses incremental xDS
    status_file: Path | None = None
    engine: bool = True  # False: serve xDS only (engines connect with ``podway engine``)
    envoy_path: str | None = None
    envoy_log_level: str = "warning"
    concurrency: int = 1
    drain_s: float = 2.0
    node_id: str = "podway-standalone"


class Standalone:
    """File source + pipeline + xDS server + (optionally) one supervised Envoy."""

    def __init__(self, opts: StandaloneOptions) -> None:
        self.opts = opts
        self.pipeline = Pipeline(FileSource(opts.manifests), translate=opts.translate)
        # With TLS the engine here has no client credentials: it connects over a private unix
        # socket of the same server instead.
        self.server = XdsServer(self.pipeline.cache, opts.xds_address, tls=opts.xds_tls,
                                on_event=self._on_event,
                                local=opts.engine and opts.xds_tls is not None)
        self.event_hooks: list[Callable[[Event], None]] = []  # e.g. benchmarks timing ACKs
        self._engine: asyncio.Future[Engine | None] | None = None

    async def engine(self) -> Engine | None:
        """The supervised engine once it exists (None with ``engine=False``)."""
        return await self._engine_future()

    def _engine_future(self) -> asyncio.Future[Engine | None]:
        if self._engine is None:
            self._engine = asyncio.get_running_loop().create_future()
        return self._engine

    async def run(self) -> None:
        """Serve until cancelled."""
        await self.server.start()
        engine = None
        try:
            if self.opts.engine:
                engine = Engine(EngineOptions(
                    envoy_path=find_envoy(self.opts.envoy_path),
                    bootstrap=bootstrap(BootstrapOptions(
                        node_id=self.opts.node_id,
                        xds=self.server.local_target or self.server.target,
                        delta=self.opts.delta)),
                    log_level=self.opts.envoy_log_level,
                    concurrency=self.opts.concurrency, drain_s=self.opts.drain_s))
            if not self._engine_future().done():
                self._engine_future().set_result(engine)
            async with asyncio.TaskGroup() as group:
                group.create_task(self.pipeline.run(), name="standalone-pipeline")
                if self.opts.status_file is not None:
                    group.create_task(self._write_status(self.opts.status_file),
                                      name="standalone-status")
                if engine is not None:
                    group.create_task(engine.run(), name="standalone-engine")
        finally:
            await self.server.stop(grace=0.5)

    def _on_event(self, event: Event) -> None:
        for hook in self.event_hooks:
            hook(event)
        self.pipeline.on_event(event)

    async def _write_status(self, path: Path) -> None:
        async for state in self.pipeline.states():
            text = dump_yaml(status_data(state.result, state.update, state.rejections))
            tmp = path.with_name(f".{path.name}.tmp")
            with contextlib.suppress(OSError):
                tmp.write_text(text, encoding="utf-8")
                os.replace(tmp, path)


def status_data(result: Result, update: SourceUpdate, nacks: Iterable[Rejection]
                ) -> dict[str, Any]:
    """Plain data of the status file (see docs/run.md)."""
    by_object = result.problems_by_object()
    objects: dict[str, Any] = {}
    for obj in sorted(update.snapshot.all(), key=lambda o: o.ref):
        problems = by_object.get(obj.ref, [])
        entry: dict[str, Any] = {
            "accepted": not any(p.severity == "error" for p in problems)}
        if problems:
            entry["problems"] = [
                {"severity": str(p.severity), "reason": str(p.reason), "message": p.message,
                 **({"field": p.field} if p.field else {})} for p in problems]
        status = result.statuses.get(obj.ref)
        if status is not None:  # Gateway API kinds: the status Podway owns, in API form
            entry["status"] = to_api(status, kind=obj.KIND)
        objects[str(obj.ref)] = entry
    return {
        "updated": datetime.now(UTC).isoformat(timespec="seconds"),
        "objects": objects,
        "load_errors": [str(e) for e in update.errors],
        "stale_files": list(update.stale_files),
        "engine_rejections": [
            {"node": n.node, "type": n.type_name, "version": n.version,
             **({"resource": n.resource} if n.resource else {}),
             "message": n.message} for n in nacks],
    }
