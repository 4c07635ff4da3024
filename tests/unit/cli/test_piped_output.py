"""Tables piped or redirected keep their key columns whole; ``--watch`` streams when piped;
``-o json`` is machine-readable. Every command here runs without a TTY and with COLUMNS=80, as a
user's ``| cat``, ``| grep`` or ``| head`` does."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from typer.testing import CliRunner

from podway.base.errors import ConfigError
from podway.cli.app import app
from podway.cli.commands import register
from podway.cli.commands.common import stdout_console
from podway.ir.dump import to_data
from podway.model import Snapshot
from podway.programs.lab.report import status_sections, table_of
from podway.sources.files import load_paths
from podway.translate import TranslateOptions, translate

ROOT = Path(__file__).resolve().parents[3]
LONG_POD = "default/httpd-deployment-7c9d8b5f4c-a-very-long-replica-name-x2k9q"
NPL = "80/tcp→198.18.10.2:61000, 8443/tcp→198.18.10.2:61001"
ENV = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}

register(app)


class FakeApi:
    def kind(self, name: str) -> str:
        return name

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        if kind != "pods":
            return []
        ns, name = LONG_POD.split("/")
        mapping = [{"podPort": 80, "nodeIP": "198.18.10.2", "nodePort": 61000, "protocol": "tcp"},
                   {"podPort": 8443, "nodeIP": "198.18.10.2", "nodePort": 61001,
                    "protocol": "tcp"}]
        return [{"metadata": {"namespace": ns, "name": name, "annotations": {
            "nodeportlocal.antrea.io": json.dumps(mapping)}},
            "spec": {"nodeName": "node-with-a-long-name-3"},
            "status": {"podIP": "198.19.3.17", "conditions": []}}]


class FakeState:
    engine_dir = Path("/nonexistent-podway-engine-dir")

    def daemon(self) -> int | None:
        return None

    def recorded(self) -> dict[str, int]:
        return {}


def test_lab_status_keeps_pod_names_and_mappings_whole_at_80_columns(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`podway lab status | cat`: the two facts the table exists for are never cut to `…`."""
    monkeypatch.setenv("COLUMNS", "80")
    sections = status_sections(FakeApi(), FakeState())  # type: ignore[arg-type]
    console = stdout_console()  # pytest's captured stdout is not a terminal
    for title, rows in sections.items():
        console.print(table_of(title, rows))
    out = capsys.readouterr().out
    assert LONG_POD in out
    assert NPL in out
    assert "…" not in out
    assert json.loads(json.dumps(sections))["Pods"][0]["NodePortLocal"] == NPL


def test_a_terminal_keeps_its_own_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal the console is the terminal's (tables fold to fit the screen)."""
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setenv("COLUMNS", "80")
    assert stdout_console().width == 80


def _state() -> tuple[dict[str, Any], dict[str, Any]]:
    loaded = load_paths([ROOT / "examples" / "quickstart"])
    ir = translate(Snapshot.of_objects(loaded.objects), TranslateOptions()).ir
    pools: dict[str, dict[str, str]] = {}
    data = to_data(ir)
    for name, pool in data["pools"].items():
        for member in pool.get("members") or []:
            pools.setdefault(name, {})[f"{member['address']}:{member['port']}"] = "healthy"
    state = {"generation": 7, "version": "v7", "mode": "clusterip", "ir": data,
             "status": {"objects": {}}, "rejections": []}
    return state, {"known": True, "pools": pools}


@contextlib.contextmanager
def admin_socket(tmp_path: Path) -> Iterator[Path]:
    """A stand-in admin endpoint (the real /state and /health shapes) on a unix socket."""
    state, health = _state()
    path = tmp_path / "podway.sock"
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    app_ = web.Application()
    app_.router.add_get("/state", _answer(state))
    app_.router.add_get("/health", _answer(health))
    runner = web.AppRunner(app_)

    async def start() -> None:
        await runner.setup()
        await web.UnixSite(runner, str(path)).start()
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()),
                                              loop.run_forever()), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield path
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def _answer(data: Any) -> Any:
    async def handler(_request: web.Request) -> web.Response:
        return web.json_response(data)
    return handler


def test_status_piped_shows_members_whole_and_json_parses(tmp_path: Path) -> None:
    """`podway status | cat` at COLUMNS=80: every member address whole; `-o json` is JSON."""
    with admin_socket(tmp_path) as socket:
        result = CliRunner().invoke(app, ["status", "--admin-socket", str(socket)],
                                    env={"COLUMNS": "80"})
        assert result.exit_code == 0, result.output
        state, _ = _state()
        members = [f"{m['address']}:{m['port']}" for pool in state["ir"]["pools"].values()
                   for m in pool.get("members") or []]
        assert members
        for member in members:
            assert member in result.output
        assert "…" not in result.output
        result = CliRunner().invoke(app, ["status", "--admin-socket", str(socket), "-o", "json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["state"]["generation"] == 7


def test_status_watch_streams_into_a_pipe_and_stops_quietly_when_it_closes(
        tmp_path: Path) -> None:
    """`podway status --watch | head`: each refresh arrives as it comes (not at exit); when the
    reader closes the pipe the command ends with status 0 and no traceback."""
    with admin_socket(tmp_path) as socket:
        proc = subprocess.Popen(
            [sys.executable, "-m", "podway", "status", "--watch", "--interval", "0.2",
             "--admin-socket", str(socket), "-o", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, cwd=tmp_path)
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()
            second = proc.stdout.readline()
            assert json.loads(first)["state"]["version"] == "v7"
            assert json.loads(second)["state"]["version"] == "v7"
            proc.stdout.close()  # the reader had enough
            _, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, err.decode()
        assert b"Traceback" not in err


def test_status_watch_tables_stream_into_a_pipe(tmp_path: Path) -> None:
    """Without -o: each refresh's tables are printed in turn (not one screen at exit)."""
    with admin_socket(tmp_path) as socket:
        proc = subprocess.Popen(
            [sys.executable, "-m", "podway", "status", "--watch", "--interval", "0.2",
             "--admin-socket", str(socket)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, cwd=tmp_path)
        try:
            assert proc.stdout is not None
            seen = 0
            while seen < 2:
                line = proc.stdout.readline()
                assert line, proc.stderr.read().decode() if proc.stderr else ""
                seen += b"pools and members" in line
        finally:
            proc.kill()
            proc.wait()


def test_validate_json_and_an_unknown_output_is_one_error_line(tmp_path: Path) -> None:
    """`validate -o json` prints the IR and the status document; `-o xml` is refused."""
    result = CliRunner().invoke(app, ["validate", str(ROOT / "examples" / "quickstart"),
                                      "-o", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["ir"]["listeners"]
    assert "objects" in doc["status"]
    result = CliRunner().invoke(app, ["validate", str(ROOT / "examples" / "quickstart"),
                                      "-o", "xml"])
    assert isinstance(result.exception, ConfigError)  # `podway` prints it as one line, exit 2
    assert str(result.exception) == "-o must be json, not 'xml'"


def test_status_says_which_instance_answers_and_lists_the_running_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a shared host the default instance may be someone else's: the command says whose
    answer it prints, and a name that does not run lists the instances that do."""
    base = tmp_path / "runtime"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base))
    (base / "podway" / "demo").mkdir(parents=True)
    (base / "podway" / "demo" / "podway.sock").touch()
    runner = CliRunner()
    result = runner.invoke(app, ["status", "--instance", "nope"])
    assert isinstance(result.exception, ConfigError)
    assert str(result.exception) == (
        f"cannot reach the admin socket {base}/podway/nope/podway.sock: instance 'nope' "
        f"({base}/podway/nope) is not running; running here: --instance demo")
    folder = tmp_path / "state"
    folder.mkdir()
    with admin_socket(folder) as socket:
        result = runner.invoke(app, ["status", "--state-dir", str(socket.parent), "-o", "json"])
        assert result.exit_code == 0, result.output
        assert f"asking the instance in {folder}" in result.stderr
        assert json.loads(result.stdout)["state"]["generation"] == 7
