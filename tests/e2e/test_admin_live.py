"""The admin endpoint of a running ``podway run``: private socket, state, config, live explain.

A real standalone stack (echo backend, Envoy) with ``admin_socket`` set; every client call goes
through the same ``get_json`` the commands use.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from podway.base.errors import ConfigError
from podway.cli.app import app
from podway.cli.commands import register
from podway.programs.standalone import Standalone, StandaloneOptions
from podway.readers.admin_api import AdminUnavailable, check_socket, get_json
from podway.translate import TranslateOptions

from .harness import SHOP_INGRESS, backend_manifests, echo_backend, eventually, free_port

pytestmark = pytest.mark.e2e
register(app)


@contextlib.asynccontextmanager
async def running(tmp_path: Path, *, in_state_dir: bool = False
                  ) -> AsyncIterator[tuple[Path, int, Standalone]]:
    """A standalone Podway serving shop.test (Service web → an echo) with its admin socket:
    at a path of its own, or (``in_state_dir``) the default, in the engine's state folder."""
    root = tmp_path / "manifests"
    root.mkdir()
    port, echo = await echo_backend("web-1")
    (root / "web.yaml").write_text(SHOP_INGRESS + "---\n" + backend_manifests("web", port))
    state = tmp_path / "state"
    socket = state / "podway.sock" if in_state_dir else tmp_path / "private" / "podway.sock"
    http = free_port()
    standalone = Standalone(StandaloneOptions(
        manifests=root, drain_s=0, admin_socket=None if in_state_dir else socket,
        state_dir=state if in_state_dir else None,
        translate=TranslateOptions(address="127.0.0.1", http_port=http, https_port=free_port())))
    task = asyncio.create_task(standalone.run())
    try:
        async with asyncio.timeout(30):
            engine = await standalone.engine()
            assert engine is not None
            await engine.wait_ready()

            async def listening() -> bool:
                return socket.exists()

            await eventually(listening, within=10)
        yield socket, http, standalone
    finally:
        for t in (task, echo):
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t


async def test_admin_socket_is_private_and_serves_state_and_config(tmp_path: Path) -> None:
    """Socket 0600 in a 0700 folder; /state has IR and status; /config has xDS without keys."""
    async with running(tmp_path) as (socket, _, _):
        assert stat.S_IMODE(socket.stat().st_mode) == 0o600
        assert stat.S_IMODE(socket.parent.stat().st_mode) == 0o700
        with pytest.raises(ConfigError, match="in use by another running Podway"):
            check_socket(socket)  # a second instance on the same path is refused
        state = await get_json(socket, "/state")
        assert state["generation"] >= 1
        assert state["mode"] == "clusterip"
        assert [ls["name"] for ls in state["ir"]["listeners"]]
        assert "Ingress/default/web" in state["status"]["objects"]
        config = await get_json(socket, "/config")
        assert {"Listener", "RouteConfiguration", "Cluster"} <= set(config["xds"])
        assert "PRIVATE KEY" not in json.dumps(config)
    assert not socket.exists()  # removed on stop


async def test_live_explain_adds_the_engines_member_health(tmp_path: Path) -> None:
    """explain over the socket: served by the pool, and each member carries Envoy's health."""
    async with running(tmp_path) as (socket, http, _):
        async def explained() -> dict[str, object]:
            while True:
                data = await get_json(socket, "/explain", [("url", f"http://shop.test:{http}/")])
                members = data["pools"][0]["members"] if data["pools"] else []
                if members and members[0]["health"] is not None:
                    return dict(data)
                await asyncio.sleep(0.05)  # Envoy has not listed the member yet

        async with asyncio.timeout(20):
            data = await explained()
        verdict = data["verdict"]
        assert isinstance(verdict, dict)
        assert verdict["outcomes"][0]["kind"] == "served"
        assert data["pools"][0]["members"][0]["health"] == "healthy"  # type: ignore[index]
        with pytest.raises(AdminUnavailable, match="scheme"):
            await get_json(socket, "/explain", [("url", "ftp://shop.test/")])



async def test_the_default_socket_is_in_the_state_folder_and_found_by_it(tmp_path: Path) -> None:
    """Without --admin-socket, run serves podway.sock in its state folder (0600), and the
    commands find it with --state-dir; it is gone after a clean stop."""
    async with running(tmp_path, in_state_dir=True) as (socket, http, _):
        assert stat.S_IMODE(socket.stat().st_mode) == 0o600
        # The command, as a user runs it (a thread: CliRunner runs its own event loop).
        result = await asyncio.to_thread(CliRunner().invoke, app, [
            "explain", f"http://shop.test:{http}/nope", "--state-dir", str(socket.parent)],
            env={"COLUMNS": "80"})
        assert result.exit_code == 0, result.output
        assert "served by pool/default/web/80" in result.output
    assert not socket.exists()



async def test_status_config_and_diagram_commands_read_the_socket(tmp_path: Path) -> None:
    """status shows the listener, the member with Envoy's health; config dump and diagram work
    from the same socket."""
    async with running(tmp_path) as (socket, _, standalone):
        engine = await standalone.engine()
        assert engine is not None

        async def listed() -> bool:  # Envoy lists the member once EDS is applied
            health = await get_json(socket, "/health")
            return bool(health["known"] and health["pools"].get("pool/default/web/80"))

        await eventually(listed, within=20)
        run = CliRunner().invoke
        result = await asyncio.to_thread(run, app, ["status", "--admin-socket", str(socket)],
                                         terminal_width=80)
        assert result.exit_code == 0, result.output
        assert "ingress/http" in result.output
        assert "healthy" in result.output
        assert "engine refusals: none" in result.output
        result = await asyncio.to_thread(run, app, ["config", "dump", "--admin-socket",
                                                    str(socket), "--only", "xds"])
        assert result.exit_code == 0, result.output
        assert "Listener:" in result.output
        assert "ir:" not in result.output
        result = await asyncio.to_thread(run, app, ["diagram", "--admin-socket", str(socket)])
        assert result.exit_code == 0, result.output
        assert "pool pool/default/web/80" in result.output
