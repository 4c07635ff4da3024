"""A listener a real Envoy accepted and then could not create is reported even when the log
line's wording is not recognised (issue 23.2, the fallback on Envoy's own
``listener_manager.listener_create_failure`` count).

The failure is made deterministic: a listener (file-based LDS, the same listener manager path
as xDS) with a socket option applied after ``listen()`` that the kernel refuses. Envoy accepts
the update, then drops the listener, logs "final pre-worker listener init ... failed" and counts
it — as when another engine took the port between bind and listen."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from podway.envoy.engine import admin, listener_failures
from podway.envoy.engine.process import CREATE_FAILURES, Engine, EngineOptions, find_envoy
from tests.e2e.harness import free_port
from tests.waiting import eventually

pytestmark = pytest.mark.e2e


def engine(tmp_path: Path) -> Engine:
    port = free_port()
    lds = tmp_path / "lds.json"
    lds.write_text(json.dumps({"resources": [{
        "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
        "name": "svc/shop/web/80/tcp",
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
        # TCP (6), an option number no kernel knows, set once listening: refused then.
        "socket_options": [{"level": 6, "name": 99999, "int_value": 1,
                            "state": "STATE_LISTENING"}],
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.direct_response",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.network."
                                      "direct_response.v3.Config",
                             "response": {"inline_string": "x"}}}]}]}]}))
    return Engine(EngineOptions(envoy_path=find_envoy(), drain_s=0, failure_poll_s=0.2,
                                bootstrap={
        "node": {"id": "engine-1", "cluster": "podway"},
        "dynamic_resources": {"lds_config": {"path_config_source": {"path": str(lds)},
                                             "resource_api_version": "V3"}}}))


@pytest.fixture
def unreadable_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Envoy's wording changed: no log line is recognised any more."""
    monkeypatch.setattr(listener_failures, "_PATTERNS", ())


async def run_until_refused(made: Engine) -> tuple[listener_failures.Refusal, ...]:
    task = asyncio.create_task(made.run())
    try:
        address = await asyncio.wait_for(made.wait_started(), 30)
        await eventually(made.listener_failures.items, within=20)
        await asyncio.sleep(1.0)  # more looks at the counter: nothing is told twice
        assert (await admin.stats(address, CREATE_FAILURES))[CREATE_FAILURES] == 1
        return made.listener_failures.items()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_count_names_the_failed_listener_when_the_log_cannot(
        tmp_path: Path, unreadable_log: None) -> None:
    told: list[listener_failures.Refusal] = []
    made = engine(tmp_path)
    made.listener_failures.subscribe(told.append)
    refused = await run_until_refused(made)
    assert [r.listener for r in refused] == ["svc/shop/web/80/tcp"]
    assert "listener_create_failure" in refused[0].reason
    assert len(told) == 1


async def test_with_a_readable_log_the_failure_is_told_once(tmp_path: Path) -> None:
    told: list[listener_failures.Refusal] = []
    made = engine(tmp_path)
    made.listener_failures.subscribe(told.append)
    refused = await run_until_refused(made)
    assert [r.listener for r in refused] == ["svc/shop/web/80/tcp"]
    assert "could not listen on its port" in refused[0].reason  # the log's reading
    assert len(told) == 1
