"""Golden files for ``podway.haproxy.render``: each translator golden case's IR → haproxy.cfg.

``haproxy/<case>/haproxy.cfg`` is the rendered configuration, ``files.txt`` every map and
crt-list it names (certificate PEMs by name only: they hold keys), ``unsupported.txt`` what the
engine reports it cannot serve exactly. Regenerate with ``pytest --update-golden`` and review
the diff like code. (``tests/e2e/test_haproxy_config.py`` has real HAProxy check each one.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from podway.haproxy.render import Rendered, RenderOptions, render
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.translate import translate

from .test_translate_golden import CASES as TRANSLATE_CASES
from .test_translate_golden import options_of

GOLDEN = Path(__file__).parent / "haproxy"
FOLDER = "/run/podway/haproxy"


def rendered_case(case: Path, folder: str = FOLDER) -> Rendered:
    text = case.read_text(encoding="utf-8")
    loaded = load_text(text, source=case.name)
    ir = translate(Snapshot.of_objects(loaded.objects), options_of(text)).ir
    return render(ir, RenderOptions(folder=folder, runtime_socket=f"{folder}/runtime.sock"))


def golden_files(out: Rendered) -> dict[str, str]:
    listing = []
    for name in sorted(out.files):
        body = "(certificate and key: not shown)\n" if name.endswith(".pem") else out.files[name]
        listing.append(f"## {name}\n{body}")
    reports = "".join(f"{u.origin or '-'}: {u.message}{' [not served]' if u.closed else ''}\n"
                      for u in out.unsupported)
    return {"haproxy.cfg": out.config, "files.txt": "".join(listing),
            "unsupported.txt": reports or "(none)\n"}


def _name(case: Path) -> str:
    return case.name.removesuffix(".in.yaml")


@pytest.mark.parametrize("case", TRANSLATE_CASES, ids=_name)
def test_haproxy_golden_of_translate_case(case: Path, update_golden: bool) -> None:
    """The HAProxy configuration of each translator golden case equals the reviewed files."""
    folder = GOLDEN / _name(case)
    out = golden_files(rendered_case(case))
    if update_golden:
        folder.mkdir(parents=True, exist_ok=True)
    for name, text in out.items():
        golden = folder / name
        if update_golden:
            golden.write_text(text, encoding="utf-8")
        else:
            assert golden.exists(), f"{golden} is missing: run pytest --update-golden"
            assert golden.read_text(encoding="utf-8") == text, f"{folder.name}/{name} differs"


def test_every_translate_case_has_haproxy_golden() -> None:
    """No HAProxy golden folder outlives its translator case."""
    assert {p.name for p in GOLDEN.iterdir() if p.is_dir()} == {_name(c) for c in TRANSLATE_CASES}
