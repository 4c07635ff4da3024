"""Real HAProxy accepts the configuration rendered for every translator golden case."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from podway.haproxy.process import HAPROXY
from tests.golden.test_haproxy_golden import rendered_case
from tests.golden.test_translate_golden import CASES

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name.removesuffix(".in.yaml"))
def test_haproxy_accepts_the_rendered_config(case: Path, tmp_path: Path) -> None:
    """``haproxy -c`` finds no error in the case's configuration, maps and certificates."""
    out = rendered_case(case, folder=str(tmp_path))
    for name, content in out.files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(content, encoding="utf-8")
    (tmp_path / "haproxy.cfg").write_text(out.config, encoding="utf-8")
    check = subprocess.run([HAPROXY, "-c", "-f", str(tmp_path / "haproxy.cfg")],
                           capture_output=True, text=True, timeout=30, check=False)
    alerts = [line for line in check.stderr.splitlines() if "ALERT" in line]
    assert check.returncode in (0, 2), alerts  # 2: valid, but no listener to start
    assert alerts == []
