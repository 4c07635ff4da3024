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


# SOURCE_DATE_EPOCH of the test builds: fixed (2026-01-01T00:00:00Z), not the last commit's
# time, so that a commit which changes nothing in the image keeps its cached build. Raise it
# with a change of the recipe if a newer time is wanted; SOURCE_DATE_EPOCH overrides it.
EPOCH = "1767225600"


def epoch() -> str:
    return os.environ.get("SOURCE_DATE_EPOCH") or EPOCH


def inputs() -> list[str]:
    """The files the image is made of, relative to the repository: pyproject, README, the
    sources and the recipe as git tracks them (an untracked file, such as the egg-info pip
    leaves under src/, does not go into the image: build.sh leaves it out too)."""
    done = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", "pyproject.toml",
                           "README.md", "src", "deploy/image"],
                          capture_output=True, check=True)
    return sorted(name for name in done.stdout.decode().split("\0")
                  if name and "__pycache__" not in name and (ROOT / name).is_file())


def content_hash() -> str:
    """What the image is made of: the working tree's bytes of every tracked input (so an
    edit not yet committed counts) and the timestamp every file gets."""
    digest = hashlib.sha256(epoch().encode() + b"\0")
    for name in inputs():
        digest.update(name.encode() + b"\0" + (ROOT / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build(folder: Path, *, cached: bool = True) -> Path:
    """The image archive for the current sources in ``folder`` (built when not there yet), or
    in ``$PODWAY_TEST_IMAGE_CACHE`` when set (a developer's folder kept between runs) unless
    ``cached`` is False (a build of its own, its Debian base made afresh too: the
    reproducibility test, which so also shows a cached base gives the same image)."""
    folder = Path((cached and os.environ.get("PODWAY_TEST_IMAGE_CACHE")) or folder)
    out = folder / f"podway-image-{content_hash()}.tar"
    if not out.exists():
        base = {"PODWAY_IMAGE_BASE_CACHE": str(folder / "base")} if cached else {}
        done = subprocess.run([str(RECIPE / "build.sh"), str(out), str(folder / "work")],
                              capture_output=True, text=True, check=False, timeout=1800,
                              env={**os.environ, "PODWAY_IMAGE_PYTHON": _python(),
                                   "SOURCE_DATE_EPOCH": epoch(), **base})
        if done.returncode != 0:
            raise AssertionError(f"deploy/image/build.sh failed:\n{done.stderr[-4000:]}")
        shutil.rmtree(folder / "work", ignore_errors=True)
    return out


def _python() -> str:
    import sys

    return sys.executable
