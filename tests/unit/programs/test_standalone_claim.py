"""`podway run`'s check for ports another program holds gives up quietly when the engine is
only slow: a loaded machine's 10,000 routes took Envoy over 30 s to bind after it said ready,
and ``podway run`` then exited with ``error:`` and nothing after it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from podway.programs import standalone as standalone_module
from podway.programs.standalone import Standalone, StandaloneOptions
from podway.sources.files import FileSource
from podway.translate import TranslateOptions

INGRESS = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: default}
spec:
  ingressClassName: podway
  rules:
  - host: a.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
"""


class SlowEngine:
    """Ready at once, its admin never answering (bound listeners never seen)."""

    admin_address: str | None = None

    def __init__(self) -> None:
        self.limits: list[float | None] = []

    async def wait_ready(self, limit_s: float | None = 30.0) -> None:
        self.limits.append(limit_s)


async def test_a_slow_engine_is_a_warning_not_an_exit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "web.yaml").write_text(INGRESS)
    run = Standalone(StandaloneOptions(manifests=tmp_path, translate=TranslateOptions(
        address="127.0.0.1", http_port=1, https_port=2)))
    run.pipeline.apply(FileSource(tmp_path).load())
    state = run.pipeline.state
    assert state is not None
    assert state.ir.listeners
    monkeypatch.setattr(standalone_module, "CLAIM_LIMIT_S", 0.2)
    engine = SlowEngine()
    with caplog.at_level(logging.WARNING, logger=standalone_module.__name__):
        await run._claim_ports(engine)  # type: ignore[arg-type]
    assert engine.limits == [None]  # Envoy's start is not bounded: it waits for listeners
    assert "did not listen on every listener within 0 s" in caplog.text

