"""What differs between two of Podway's image archives (OCI layouts as tars, one layer each):
every file of the layer whose content, mode, owner or time differs, or that only one holds.
Standard library only (it runs with the host's python3):

    python3 deploy/image/image_diff.py A.tar B.tar     # exit 1 when anything differs
"""

from __future__ import annotations

import hashlib
import json
import sys
import tarfile
from typing import IO


def _member(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    for candidate in (f"./{name}", name):
        try:
            found = tar.extractfile(candidate)
        except KeyError:
            continue
        if found is not None:
            return found
    raise SystemExit(f"image_diff: {tar.name}: no {name}")


def layer_files(path: str) -> dict[str, tuple[str, int, int, int, float]]:
    """Every entry of every layer: path → (sha256 or link target, mode, uid, gid, mtime)."""
    out: dict[str, tuple[str, int, int, int, float]] = {}
    with tarfile.open(path) as image:
        index = json.load(_member(image, "index.json"))
        manifest = json.load(_member(image, "blobs/sha256/"
                                     + index["manifests"][0]["digest"].split(":")[1]))
        out["(image config)"] = (manifest["config"]["digest"], 0, 0, 0, 0.0)
        for layer in manifest["layers"]:
            blob = _member(image, "blobs/sha256/" + layer["digest"].split(":")[1])
            with tarfile.open(fileobj=blob, mode="r|*") as files:
                for entry in files:
                    if entry.isfile():
                        data = files.extractfile(entry)
                        what = hashlib.sha256(data.read() if data else b"").hexdigest()
                    else:
                        what = entry.linkname or entry.type.decode()
                    out[entry.name] = (what, entry.mode, entry.uid, entry.gid, entry.mtime)
    return out


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit("usage: image_diff.py A.tar B.tar")
    a, b = layer_files(sys.argv[1]), layer_files(sys.argv[2])
    differ = sorted(n for n in a.keys() | b.keys() if a.get(n) != b.get(n))
    for name in differ:
        print(f"{name}\n  a: {a.get(name)}\n  b: {b.get(name)}")
    print(f"{len(differ)} of {len(a.keys() | b.keys())} entries differ")
    raise SystemExit(1 if differ else 0)


if __name__ == "__main__":
    main()
