"""The --config file: one parser with one-line errors; following it yields each new good
setting, keeps the last good one through a bad write, and warns once per problem."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from podway.base.errors import ConfigError
from podway.programs.controller.config import LiveConfig, follow_config, load_config, parse_config
from podway.translate import BackendMode

PATH = Path("podway.yaml")


@pytest.mark.parametrize(("text", "expected"), [
    ("", LiveConfig()),
    ("# nothing set\n", LiveConfig()),
    ("{}", LiveConfig()),
    ("backendMode: nodeport\n", LiveConfig(backend_mode=BackendMode.NODEPORT)),
    ("engineGroups: {edge: envoy, db: kernel, '': haproxy}\n",
     LiveConfig(engine_kinds={"edge": "envoy", "db": "kernel", "": "haproxy"})),
])
def test_good_files(text: str, expected: LiveConfig) -> None:
    """Empty or comment-only means nothing set; backendMode takes a mode name."""
    assert parse_config(text, path=PATH) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("backendMode: [a\n", "not YAML (line 2)"),
    ("- backendMode\n", "expected a mapping of settings (backendMode, engineGroups), got list"),
    ("backendmode: clusterip\n",
     "unknown setting backendmode (known: backendMode, engineGroups)"),
    ("engineGroups: [edge]\n",
     "engineGroups must map group names to an engine kind (envoy, haproxy, kernel)"),
    ("engineGroups: {edge: nginx}\n",
     "engineGroups: 'edge': 'nginx' is not one of envoy, haproxy, kernel"),
    ("backendMode: direct\n", "backendMode 'direct' is not one of clusterip, nodeport, "
                              "nodeportlocal"),
])
def test_bad_files_are_one_line(text: str, expected: str) -> None:
    """Each mistake is one line naming the file and what is wrong."""
    with pytest.raises(ConfigError) as caught:
        parse_config(text, path=PATH)
    assert str(caught.value) == f"--config podway.yaml: {expected}"
    assert "\n" not in str(caught.value)


def test_a_binary_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"\xff\xfe\x00junk")
    with pytest.raises(ConfigError, match="not text"):
        load_config(path)


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        load_config(tmp_path / "absent.yaml")


async def test_following_yields_changes_and_keeps_the_last_good(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A new mode is yielded; a bad write and a removed file keep it (one warning each, not
    one per poll); the key removed yields "unset"."""
    path = tmp_path / "podway.yaml"
    path.write_text("backendMode: clusterip\n")
    seen: asyncio.Queue[LiveConfig] = asyncio.Queue()
    first = load_config(path)

    async def follow() -> None:
        async for live in follow_config(path, first, poll_s=0.005):
            await seen.put(live)

    task = asyncio.create_task(follow())
    try:
        path.write_text("backendMode: nodeportlocal\n")
        got = await asyncio.wait_for(seen.get(), 5)
        assert got.backend_mode is BackendMode.NODEPORTLOCAL
        path.write_text("backendMode: sideways\n")
        await asyncio.sleep(0.1)  # many polls
        path.unlink()
        await asyncio.sleep(0.1)
        path.write_text("# unset\n")
        assert await asyncio.wait_for(seen.get(), 5) == LiveConfig()
        assert seen.empty()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2
    assert "'sideways'" in warnings[0]
    assert "cannot read it" in warnings[1]
