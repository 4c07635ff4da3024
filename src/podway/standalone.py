"""Standalone mode: file source → translator → xDS cache and server → one supervised Envoy.

One process tree, no cluster, no root. The pipeline is level-triggered: each folder update is
translated incrementally, built (memoised by IR identity), and set into the cache, which pushes
only the resource types whose content changed. ``generation`` counts applied updates so callers
(tests, the demo) can wait for "my edit is in the cache".

The status file is rewritten atomically after every update: each object's problems (translator
problems and load errors), stale files served from their last good load, and engines' NACKs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from podway.engine.local import LocalEngineOptions, colocated_engine
from podway.engine.process import Engine
from podway.engine.state import open_state
from podway.ir.dump import dump_yaml
from podway.sources.base import SourceUpdate
from podway.sources.files import FileSource
from podway.translate import IncrementalTranslator, Result, TranslateOptions
from podway.translate.status import to_api
from podway.xds.build import Builder
from podway.xds.cache import Cache
from podway.xds.protocol import Event, Nack
from podway.xds.server import ServerTLS, XdsServer

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class StandaloneOptions:
    manifests: Path
    translate: TranslateOptions = field(default_factory=TranslateOptions)
    xds_address: str = ""  # "": only the engine's private socket; "host:port" or "unix:/path"
    xds_tls: ServerTLS | None = None
    xds_unauthenticated: bool = False  # opt-in: clear-text loopback TCP (never sent Secrets)
    state_dir: Path | None = None  # the engine's folder; None: ephemeral (no adoption)
    delta: bool = True  # the engine uses incremental xDS
    status_file: Path | None = None
    engine: bool = True  # False: serve xDS only (engines connect with ``podway engine``)
    envoy_path: str | None = None
    envoy_log_level: str = "warning"
    concurrency: int = 1
    drain_s: float = 2.0
    node_id: str = "podway-standalone"


class Standalone:
    def __init__(self, opts: StandaloneOptions) -> None:
        self.opts = opts
        self.cache = Cache()
        # The engine here connects over a private unix socket in its state folder (no TLS or
        # client certificate needed), whatever else the server listens on.
        self.server = XdsServer(self.cache, opts.xds_address, tls=opts.xds_tls,
                                on_event=self._on_event,
                                unauthenticated=opts.xds_unauthenticated)
        self.engine: Engine | None = None
        self.generation = 0
        self.result: Result | None = None
        self.update: SourceUpdate | None = None
        self._applied = asyncio.Condition()
        self._nacks: list[Nack] = []
        self.event_hooks: list[Callable[[Event], None]] = []  # e.g. benchmarks timing ACKs

    async def run(self) -> None:
        """Serve until cancelled."""
        with contextlib.ExitStack() as stack:
            state = stack.enter_context(open_state(self.opts.state_dir)) if self.opts.engine \
                else None
            await self.server.start(local=state.xds_socket if state else None)
            try:
                if state is not None:
                    self.engine = colocated_engine(state, LocalEngineOptions(
                        node_id=self.opts.node_id, delta=self.opts.delta,
                        envoy_path=self.opts.envoy_path, log_level=self.opts.envoy_log_level,
                        concurrency=self.opts.concurrency, drain_s=self.opts.drain_s))
                async with asyncio.TaskGroup() as group:
                    group.create_task(self._pipeline(), name="standalone-pipeline")
                    if self.engine is not None:
                        group.create_task(self.engine.run(), name="standalone-engine")
            finally:
                await self.server.stop(grace=0.5)

    async def wait_generation(self, generation: int) -> None:
        """Until at least ``generation`` updates have been applied to the cache."""
        async with self._applied:
            await self._applied.wait_for(lambda: self.generation >= generation)

    async def _pipeline(self) -> None:
        source = FileSource(self.opts.manifests)
        translator = IncrementalTranslator(self.opts.translate)
        builder = Builder()
        reported: tuple[object, ...] = ()
        async for update in source.watch():
            began = time.perf_counter()
            result = translator.update(update.snapshot, update.changed)
            changes = self.cache.set(builder.build(result.ir))
            self.result, self.update = result, update
            log.info("applied update in %.1f ms: %s", (time.perf_counter() - began) * 1000,
                     ", ".join(sorted(c.rsplit(".", 1)[-1] for c in changes)) or "no change")
            if result.problems != reported:  # log problems when they change, not every update
                for problem in result.problems:
                    log.warning("%s", problem)
                reported = result.problems
            self._write_status()
            async with self._applied:
                self.generation += 1
                self._applied.notify_all()

    def _on_event(self, event: Event) -> None:
        for hook in self.event_hooks:
            hook(event)
        if isinstance(event, Nack):
            self._nacks = [*self._nacks[-19:], event]
            self._write_status()

    def _write_status(self) -> None:
        path = self.opts.status_file
        if path is None or self.result is None or self.update is None:
            return
        text = dump_yaml(status_data(self.result, self.update, self._nacks))
        tmp = path.with_name(f".{path.name}.tmp")
        with contextlib.suppress(OSError):
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)


def status_data(result: Result, update: SourceUpdate, nacks: Iterable[Nack]) -> dict[str, Any]:
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
            {"node": n.node, "type": n.type_url.rsplit(".", 1)[-1], "version": n.version,
             "message": n.message} for n in nacks],
    }
