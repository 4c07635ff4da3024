"""The chart tests' Helm: a Python ≥ 3.12 with helm-sdkpy (``tests/deploy/helm.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.helm import helm_python


@pytest.fixture(scope="module")
def helm() -> Path:
    python = helm_python()
    if python is None:
        pytest.skip("no Python >= 3.12 with helm-sdkpy (./dev creates .venv-helm when an "
                    "interpreter is found; or set PODWAY_HELM_PYTHON)")
    return python
