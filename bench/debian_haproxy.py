"""Another Debian release's HAProxy, unpacked beside the system's, for the HAProxy benches.

The benches' hand-written HAProxy files run Debian's own HAProxy (``/usr/sbin/haproxy``: 2.6
with OpenSSL 3.0 on bookworm). To price what another packaged build would change (say Debian
13's HAProxy 3.0 with OpenSSL 3.5, issue 26's TLS handshakes), this fetches that release's
``haproxy`` package and the libraries it links from the Debian archive (apt with private
lists: the system's apt state is not touched), unpacks them into ``--into`` (no install, no
root filesystem) and prints the command that runs that HAProxy through its own release's
dynamic loader:

    .venv/bin/python bench/debian_haproxy.py [--suite trixie] [--into /tmp/haproxy-trixie]
    export <the line it printed: PODWAY_BENCH_OTHER_HAPROXY='...'>
    .venv/bin/python bench/tls_handshakes.py --servers envoy,haproxy-podway,other-haproxy-podway
    .venv/bin/python bench/dataplane.py --targets envoy-static,haproxy-tls,haproxy-tls-other

``PODWAY_BENCH_OTHER_HAPROXY`` (shell words) is the HAProxy of ``bench/tls_handshakes.py``'s
``other-*`` servers and ``bench/dataplane.py``'s ``haproxy-tls-other``, beside the system's
(``haproxy_instructions.haproxy_command``). Such a HAProxy cannot reload (its master would
re-execute the loader), which neither bench does. Needs apt and the archive (the machine's
package registry).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ARCHIVE = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
LIBDIRS = ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu")
LOADER = "usr/lib64/ld-linux-x86-64.so.2"


def apt_options(work: Path, suite: str) -> list[str]:
    """apt with its own sources, lists, cache and (empty) status: only ``suite`` is seen."""
    sources = work / "bench.sources"  # deb822: apt reads the format by this suffix
    sources.write_text(f"Types: deb\nURIs: {ARCHIVE}\nSuites: {suite}\nComponents: main\n"
                       f"Signed-By: {KEYRING}\n", encoding="utf-8")
    for sub in ("lists/partial", "cache/archives/partial"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    (work / "status").touch()
    return ["-o", f"Dir::Etc::sourcelist={sources}", "-o", "Dir::Etc::sourceparts=-",
            "-o", f"Dir::State::Lists={work / 'lists'}", "-o", f"Dir::Cache={work / 'cache'}",
            "-o", f"Dir::State::status={work / 'status'}", "-o", "APT::Architecture=amd64",
            "-o", "APT::Sandbox::User=root"]


def apt(command: list[str], cwd: Path | None = None) -> None:
    done = subprocess.run(command, check=False, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(command[:1] + command[-2:])} failed:\n{done.stderr}")


def libraries(options: list[str]) -> list[str]:
    """``haproxy`` and every library package it depends on, recursively (tools such as
    adduser are left out: only what the binary loads is needed)."""
    out = subprocess.run(["apt-cache", *options, "depends", "--recurse", "--no-recommends",
                          "--no-suggests", "--no-conflicts", "--no-breaks", "--no-replaces",
                          "--no-enhances", "haproxy"], check=True, capture_output=True,
                         text=True).stdout
    names = {line.strip() for line in out.splitlines() if line and not line.startswith(" ")}
    return sorted(n for n in names if n == "haproxy" or n.startswith("lib"))


def fetch(suite: str, into: Path) -> list[str]:
    """Unpack ``suite``'s HAProxy into ``into``; the command that runs it."""
    into.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pw-apt-") as tmp:
        work = Path(tmp)
        options = apt_options(work, suite)
        apt(["apt-get", *options, "update"])
        packages = libraries(options)
        debs = work / "debs"
        debs.mkdir()
        apt(["apt-get", *options, "download", *packages], cwd=debs)
        for deb in sorted(debs.glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(into)], check=True)
    command = [str(into / LOADER), "--library-path",
               ":".join(str(into / d) for d in LIBDIRS), str(into / "usr/sbin/haproxy")]
    missing = subprocess.run([*command[:3], "--list", command[3]], check=False,
                             capture_output=True, text=True)
    if missing.returncode != 0 or "not found" in missing.stdout:
        raise SystemExit(f"{suite}'s haproxy does not load:\n{missing.stdout}{missing.stderr}")
    return command


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--suite", default="trixie", help="a Debian release with amd64 "
                        "packages on the archive (default: trixie, Debian 13)")
    parser.add_argument("--into", type=Path, default=None,
                        help="folder to unpack into (default /tmp/haproxy-<suite>)")
    args = parser.parse_args()
    into = (args.into or Path(f"/tmp/haproxy-{args.suite}")).resolve()
    command = fetch(args.suite, into)
    version = subprocess.run([*command, "-v"], check=True, capture_output=True,
                             text=True).stdout.splitlines()[0]
    print(version, file=sys.stderr)
    print(f"PODWAY_BENCH_OTHER_HAPROXY={shlex.quote(shlex.join(command))}")


if __name__ == "__main__":
    main()
