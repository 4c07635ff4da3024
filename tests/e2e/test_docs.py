"""The docs show what runs: the quickstart's table is the table `podway demo` prints, and the
Gateway API "Try it" starts the backends the example's EndpointSlices name."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from podway.model import EndpointSlice
from podway.programs.demo import DemoOptions, run_demo
from podway.sources.files import load_paths

from .harness import free_port

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).parents[2]


def table_rows(text: str) -> list[tuple[str, str, str]]:
    """(request, status, answered by) of every body row of a rich table in ``text``."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if line.lstrip().startswith("│") and len(cells) == 4:
            rows.append((cells[0], cells[1], cells[2]))
    return rows


@pytest.mark.parametrize(("address", "engine"), [("127.0.0.1", "envoy"), ("127.0.0.2", "envoy"),
                                               ("127.0.0.1", "haproxy")])
async def test_quickstart_table_is_what_the_demo_prints(tmp_path: Path, address: str,
                                                        engine: str) -> None:
    """Every row of docs/quickstart.md's table, in order, is a row `podway demo --once` prints,
    also with `--address` on another loopback address (listeners bind it, probes go there),
    and with the HAProxy engine (`--engine haproxy`)."""
    documented = table_rows((ROOT / "docs/quickstart.md").read_text())
    assert len(documented) >= 8
    # The example's fixed ports may be taken by a running demo: move every one to a free port.
    chosen: set[int] = set()
    while len(chosen) < 6:  # four backends and two listeners, all different
        chosen.add(free_port())
    picked = sorted(chosen)
    ports = dict(zip((18101, 18102, 18103, 18000), picked[:4], strict=True))
    manifests = tmp_path / "quickstart"
    shutil.copytree(ROOT / "examples/quickstart", manifests)
    for path in manifests.glob("*.yaml"):
        text = path.read_text()
        for old, new in ports.items():
            text = re.sub(rf"\b{old}\b", str(new), text)
        path.write_text(text)
    console = Console(record=True, width=120)
    results = await run_demo(DemoOptions(manifests=manifests, address=address,
                                         http_port=picked[4], https_port=picked[5],
                                         once=True, engine=engine), console)
    back = {str(new): str(old) for old, new in ports.items()}
    printed = [(re.sub(r"\d+", lambda m: back.get(m.group(), m.group()), probe.label),
                outcome.status, outcome.backend) for probe, outcome in results]
    assert printed == documented


def test_gateway_try_it_starts_the_backends_the_example_names() -> None:
    """Each documented `podway echo --port N --name X` is a port of examples/gateway, named."""
    doc = (ROOT / "docs/gateway-api.md").read_text()
    started = dict(re.findall(r"podway echo --port (\d+) --name ([\w-]+)", doc))
    loaded = load_paths([ROOT / "examples/gateway"])
    slice_ports = {str(port.port) for obj in loaded.objects if isinstance(obj, EndpointSlice)
                   for port in obj.ports}
    assert set(started) == slice_ports
    assert {"api", "api-next"} <= set(started.values())
    assert "podway run --manifests examples/gateway" in doc
