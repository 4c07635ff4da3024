"""Golden translation tests: ``<case>.in.yaml`` manifests → ``<case>.out.yaml`` report.

The report is the status document (``podway.status``, what ``--status-file`` writes) plus the IR.

A document of ``kind: TranslateOptions`` (apiVersion ``podway.io/test``) in the input sets the
translation options. Regenerate with ``pytest --update-golden`` and review the diff like code.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from podway.ir import EngineKind, TLSOptions
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.readers.render.report import report_yaml
from podway.translate import BackendMode, TranslateOptions, translate
from podway.translate.core.nginx_config import NginxConfig

CASES = sorted((Path(__file__).parent / "translate").glob("*.in.yaml"))


def options_of(text: str) -> TranslateOptions:
    for doc in yaml.safe_load_all(text):
        if isinstance(doc, dict) and doc.get("kind") == "TranslateOptions":
            spec = dict(doc.get("spec") or {})
            if "takeover_classes" in spec:
                spec["takeover_classes"] = tuple(spec["takeover_classes"])
            if "mode" in spec:
                spec["mode"] = BackendMode(spec["mode"])
            if "l4_engine" in spec:
                spec["l4_engine"] = EngineKind(spec["l4_engine"])
            if "nginx" in spec:
                spec["nginx"] = NginxConfig(**spec["nginx"])
            if "oidc_key" in spec:
                spec["oidc_key"] = str(spec["oidc_key"]).encode()
            if "tls" in spec:
                tls = dict(spec["tls"])
                spec["tls"] = TLSOptions(**{**tls, "ciphers": tuple(tls.get("ciphers", ()))})
            return TranslateOptions(**spec)
    return TranslateOptions(address="198.18.0.10")


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name.removesuffix(".in.yaml"))
def test_translate_golden(case: Path, update_golden: bool) -> None:
    """The case's manifests translate to exactly the recorded status document and IR."""
    text = case.read_text()
    loaded = load_text(text, source=case.name)
    snapshot = Snapshot.of_objects(loaded.objects)
    result = translate(snapshot, options_of(text))
    actual = report_yaml(result, loaded.errors, snapshot=snapshot)
    expected_file = case.with_name(case.name.replace(".in.yaml", ".out.yaml"))
    if update_golden or not expected_file.exists():
        expected_file.write_text(actual)
        if not update_golden:
            pytest.fail(f"{expected_file.name} was missing and has been written; review it")
    assert actual == expected_file.read_text()


def test_there_are_golden_cases() -> None:
    """The golden folder is not silently empty."""
    assert len(CASES) >= 10
