"""The served table says how each TLS route treats the bytes: passed through or terminated."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from podway.model import Snapshot
from podway.model.loader import load_text
from podway.readers.render.table import served_table
from podway.translate import TranslateOptions, translate

CASE = Path(__file__).parents[2] / "golden/translate/gateway-tls-shared-port.in.yaml"


def test_passthrough_and_terminated_tls_routes_are_told_apart() -> None:
    """db.example.com (HTTPS port, passthrough) and mq.example.com (TLS Terminate listener)."""
    loaded = load_text(CASE.read_text(), source=CASE.name)
    ir = translate(Snapshot.of_objects(loaded.objects), TranslateOptions()).ir
    console = Console(width=250, record=True)
    console.print(served_table(ir))
    rows = {line.split("│")[2].strip(): line.split("│")[3].strip()
            for line in console.export_text().splitlines()
            if line.count("│") > 4 and "example.com" in line.split("│")[2]}
    assert rows["db.example.com, shop.example.com"] == "(TLS passthrough)"
    assert rows["mq.example.com"] == "(TLS terminated)"
