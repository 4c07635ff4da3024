"""BIRD's own output under ``BirdSpeaker``: written to ``bird.log`` in its folder, never to a
pipe that nobody reads while BIRD runs, and quoted when BIRD does not start. Runs the real
``bird`` on a configuration it refuses (it stops at parsing: no socket, no route, no session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from podway.base.errors import EnvironmentProblem
from podway.programs.vip import speaker as speaker_module
from podway.programs.vip.bird import BgpSettings
from podway.programs.vip.speaker import BirdSpeaker


async def test_a_refused_configuration_is_quoted_from_birds_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(speaker_module, "engine_config",
                        lambda settings, vips: "this is not a bird configuration;\n")
    bird = BirdSpeaker(BgpSettings(router_id="198.18.0.1", local_as=65001, neighbors=()),
                       workdir=tmp_path)
    for _ in (1, 2):  # a second start quotes its own output, not the first one's
        with pytest.raises(EnvironmentProblem) as refused:
            await bird.start(())
        message = str(refused.value)
        assert "syntax error" in message, message
        assert message.count("syntax error") == 1, message
        assert str(bird.log) in message
    assert bird.log.read_text().count("syntax error") == 2
    assert bird.log.stat().st_mode & 0o777 == 0o600
