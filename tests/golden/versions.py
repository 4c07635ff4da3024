"""Every golden case's xDS resources as versions: ``python -m tests.golden.versions`` prints, as
JSON, case → type URL → name → version (the content digest the cache and a reconnecting
engine compare). ``test_restart_versions`` runs it in processes with different hash seeds."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from podway.envoy.config import Builder, build
from podway.ir.load import from_yaml
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.translate import translate

from .test_translate_golden import CASES, options_of

XDS_CASES = sorted(p for p in (Path(__file__).parent / "xds").iterdir()
                   if (p / "ir.yaml").exists())


def versions() -> dict[str, dict[str, dict[str, str]]]:
    out: dict[str, dict[str, dict[str, str]]] = {}
    for case in CASES:
        text = case.read_text(encoding="utf-8")
        loaded = load_text(text, source=case.name)
        ir = translate(Snapshot.of_objects(loaded.objects), options_of(text)).ir
        built = Builder().build(ir)
        out[case.name] = {t: {n: r.digest for n, r in rs.items()} for t, rs in built.items()}
    for folder in XDS_CASES:
        built = build(from_yaml((folder / "ir.yaml").read_text(encoding="utf-8")))
        out[folder.name] = {t: {n: r.digest for n, r in rs.items()} for t, rs in built.items()}
    return out


if __name__ == "__main__":
    json.dump(versions(), sys.stdout, sort_keys=True)
