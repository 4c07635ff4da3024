"""Envoy's own ``x-envoy-*`` headers (docs/performance.md, "Envoy's x-envoy-* headers"): by
default the router adds none — no ``x-envoy-upstream-service-time`` to the client, no
``x-envoy-expected-rq-timeout-ms`` or ``x-envoy-original-path`` (a rewritten path) to the
member; ``--envoy-stats detailed``, the diagnostic mode, keeps them. What the connection
manager does is unchanged either way: ``x-envoy-external-address`` (the client address) reaches
the member, and a client's own ``x-envoy-*`` control headers are stripped."""

from __future__ import annotations

from pathlib import Path

import pytest

from podway.envoy.engine.bootstrap import EnvoyStats

from .gateway_helpers import CLASS, backend, gateway, request, route
from .harness import eventually, free_port
from .local_servers import stack_in

pytestmark = pytest.mark.e2e

REWRITE = ("{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, "
           "replacePrefixMatch: /new}}}")


@pytest.mark.parametrize("stats", [EnvoyStats.BOUNDED, EnvoyStats.DETAILED])
async def test_the_router_adds_envoy_headers_only_in_the_diagnostic_mode(
        tmp_path: Path, stats: EnvoyStats) -> None:
    async with stack_in(tmp_path, envoy_stats=stats) as stack:
        await backend(stack, "app")
        port = free_port()
        stack.write("gw.yaml", CLASS + "---\n" + gateway(
            f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
        stack.write("routes.yaml", route("rw", f"""  parentRefs: [{{name: gw}}]
  hostnames: [rw.test]
  rules:
  - matches: [{{path: {{value: /old}}}}]
    filters: [{REWRITE}]
    backendRefs: [{{name: app, port: 80}}]
"""))
        await stack.start()
        sent = {"x-envoy-upstream-rq-timeout-ms": "1", "x-envoy-max-retries": "5"}

        async def served() -> tuple[dict[str, str], dict[str, object]]:
            status, headers, echo = await request(port, "rw.test", "/old/x", headers=sent)
            assert status == 200, (status, echo)
            return headers, echo

        headers, echo = await eventually(served, within=30)
    assert echo["path"] == "/new/x"
    seen = echo["headers"]
    assert isinstance(seen, dict)
    to_member = {k for k in seen if k.startswith("x-envoy-")}
    to_client = {k for k in headers if k.startswith("x-envoy-")}
    assert seen["x-envoy-external-address"] == "127.0.0.1"  # the manager's, kept
    assert not to_member & set(sent)  # a client's control headers never reach the member
    if stats is EnvoyStats.BOUNDED:
        assert to_member == {"x-envoy-external-address"}, seen
        assert to_client == set(), headers
    else:
        assert seen["x-envoy-original-path"] == "/old/x"
        assert "x-envoy-expected-rq-timeout-ms" in to_member, seen
        assert "x-envoy-upstream-service-time" in to_client, headers
