"""Podway's OCI image for the tests that need it (marked ``image``): built once per test run
with ``deploy/image/build.sh`` into the run's own temporary folder, keyed by a hash of what goes
into it (sources, pyproject, the image recipe), so every test of the run shares one build.

Building takes minutes (a Debian root filesystem, every wheel, Envoy): those tests are skipped
with their reason where the tools or root are missing."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "deploy" / "image"


def missing() -> str | None:
    if os.geteuid() != 0:
        return "building the image needs root (mmdebstrap --mode=root)"
    for tool in ("mmdebstrap", "umoci", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install {tool})"
    return None


def epoch() -> str:
    """SOURCE_DATE_EPOCH of the test builds: as build.sh's default, the last commit's time."""
    done = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"],
                          capture_output=True, text=True, check=False)
    return os.environ.get("SOURCE_DATE_EPOCH") or done.stdout.strip() or "0"


def content_hash() -> str:
    """What the image is made of: every source file, pyproject, README, the recipe and the
    timestamp every file gets."""
    digest = hashlib.sha256(epoch().encode() + b"\0")
    files = [ROOT / "pyproject.toml", ROOT / "README.md",
             *sorted(p for p in (ROOT / "src").rglob("*")
                     if p.is_file() and "__pycache__" not in p.parts),
             *sorted(p for p in RECIPE.rglob("*") if p.is_file())]
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build(folder: Path, *, cached: bool = True) -> Path:
    """The image archive for the current sources in ``folder`` (built when not there yet), or
    in ``$PODWAY_TEST_IMAGE_CACHE`` when set (a developer's folder kept between runs) unless
    ``cached`` is False (a build of its own: the reproducibility test)."""
    folder = Path((cached and os.environ.get("PODWAY_TEST_IMAGE_CACHE")) or folder)
    out = folder / f"podway-image-{content_hash()}.tar"
    if not out.exists():
        done = subprocess.run([str(RECIPE / "build.sh"), str(out), str(folder / "work")],
                              capture_output=True, text=True, check=False, timeout=1800,
                              env={**os.environ, "PODWAY_IMAGE_PYTHON": _python(),
                                   "SOURCE_DATE_EPOCH": epoch()})
        if done.returncode != 0:
            raise AssertionError(f"deploy/image/build.sh failed:\n{done.stderr[-4000:]}")
        shutil.rmtree(folder / "work", ignore_errors=True)
    return out


def _python() -> str:
    import sys

    return sys.executable
