"""Instructions per TLS handshake: HAProxy (Debian's, OpenSSL 3.0) configured several ways
beside a static Envoy (BoringSSL), counted by Valgrind's callgrind (issue 26: new TLS
handshakes per LB CPU-second >= 1.0x Envoy).

``bench/dataplane.py``'s "new TLS handshake" workload is ``wrk``, whose OpenSSL client keeps
its session and resumes it on every new connection (TLS 1.3: a PSK with a fresh X25519
exchange, ``psk_dhe_ke``, the only mode OpenSSL and BoringSSL clients offer). This bench's
client is Python's ``ssl`` (the same OpenSSL 3.0): ``resumed`` hands each connection the
session of the one before (as wrk does), ``full`` never does. Each connection sends one
``GET`` and reads the answer to its end; the server under callgrind (one HAProxy process,
``nbthread 1``; Envoy ``--concurrency 1``, every thread counted) has its counters zeroed after
a warm-up and dumped after N handshakes: user-space instructions per handshake, exact and
load-free (kernel work, the TCP connection itself, is not counted).

Servers (``--servers``, all by default):

* ``haproxy``       the hand-written file of ``bench/dataplane.py`` (OpenSSL's defaults);
* ``haproxy-podway`` that file with what Podway renders: TLS 1.3 suites with AES-128-GCM
  first and ``no-tls-tickets`` (resumption from HAProxy's session cache);
* ``haproxy-keys``  AES-128-GCM first and a ``tls-ticket-keys`` file (HAProxy's own ticket
  callback instead of OpenSSL's default tickets);
* ``haproxy-x25519`` Podway's settings and the key-exchange groups cut to X25519;
* ``haproxy-tls12`` Podway's settings at TLS 1.2 at most (a reference only: nginx 1.22's
  default protocol, where a resumption needs no key exchange);
* ``envoy``         ``bench/dataplane.py``'s ``envoy-static`` (BoringSSL, its defaults).

``other-<server>`` (e.g. ``other-haproxy-podway``) is that HAProxy server run by another
HAProxy build, the one ``PODWAY_BENCH_OTHER_HAPROXY`` names (``bench/debian_haproxy.py``
unpacks Debian 13's HAProxy 3.0 with OpenSSL 3.5 and prints the setting), beside the system's.

    .venv/bin/python bench/tls_handshakes.py [--handshakes 100] [--servers a,b]
        [--modes resumed,full] [--keep FOLDER]

It kills only the processes it started; Envoy's start under Valgrind takes 1-5 minutes on a
loaded machine.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import socket
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import dataplane as dp
import haproxy_engine as he
import haproxy_instructions as counting
from speedref import measure

from podway.envoy.engine.process import find_envoy
from podway.haproxy.tls import TLS13_SUITES

PODWAY_TLS = (f"  ssl-default-bind-ciphersuites {TLS13_SUITES}\n"
              "  ssl-default-bind-options no-tls-tickets\n")
HAPROXY_SETTINGS = {  # server: global lines, extra bind words
    "haproxy": ("", ""),
    "haproxy-podway": (PODWAY_TLS, ""),
    "haproxy-keys": (f"  ssl-default-bind-ciphersuites {TLS13_SUITES}\n",
                     " tls-ticket-keys {keys}"),
    "haproxy-x25519": (PODWAY_TLS + "  ssl-default-bind-curves X25519\n", ""),
    "haproxy-tls12": (PODWAY_TLS, " ssl-max-ver TLSv1.2"),
}
REQUEST = b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"


def haproxy_config(folder: Path, name: str, port: int, upstream: int) -> list[str]:
    """``bench/dataplane.py``'s hand-written HAProxy with ``HAPROXY_SETTINGS[name]``."""
    pem = folder / "server.pem"
    pem.write_text((folder / "cert.pem").read_text() + (folder / "key.pem").read_text())
    keys = folder / "ticket.keys"  # three 48-byte keys, base64, as HAProxy reads them
    keys.write_text("".join(
        base64.b64encode(os.urandom(48)).decode() + "\n" for _ in range(3)))
    other = name.startswith("other-")
    extra, bind = HAPROXY_SETTINGS[name.removeprefix("other-")]
    conf = folder / f"{name}.cfg"
    conf.write_text(dp.haproxy_config(
        extra, f"  bind 127.0.0.1:{port} ssl crt {pem}{bind.format(keys=keys)}\n", upstream),
        encoding="utf-8")
    return [*counting.haproxy_command(other=other), "-f", str(conf)]


def envoy_command(folder: Path, port: int, upstream: int) -> list[str]:
    ctx = SimpleNamespace(cert=folder / "cert.pem", key=folder / "key.pem",
                          upstream_http=upstream)
    config = dp._static_bootstrap(ctx, dp.free_port(), port)  # type: ignore[arg-type]
    for listener in config["static_resources"]["listeners"]:  # Valgrind's first requests
        manager = listener["filter_chains"][0]["filters"][0]["typed_config"]  # take > 15 s
        for vhost in manager["route_config"]["virtual_hosts"]:
            for route in vhost["routes"]:
                route["route"]["timeout"] = "0s"
    path = folder / "envoy.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return [str(find_envoy()), "-c", str(path), "--concurrency", "1", "--disable-hot-restart",
            "-l", "error"]


def handshakes(port: int, count: int, *, resume: bool) -> int:
    """``count`` connections with one request each; how many resumed a session."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    session, reused = None, 0
    for _ in range(count):
        with socket.create_connection(("127.0.0.1", port), 300) as raw, \
                context.wrap_socket(raw, server_hostname="bench",
                                    session=session if resume else None) as conn:
            conn.sendall(REQUEST)
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
            if not answer.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"answer on {port}: {answer[:200]!r}")
            reused += bool(conn.session_reused)
            session = conn.session  # the ticket came with the answer (TLS 1.3)
    return reused


def per_handshake(pid: int, out: Path, port: int, count: int, *, resume: bool
                  ) -> tuple[float, int, str]:
    """Instructions per handshake of ``count`` (after a warm-up), how many resumed, and the
    protocol negotiated."""
    handshakes(port, 20, resume=resume)
    subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)
    before = set(out.parent.glob(f"{out.name}.{pid}.*"))
    reused = handshakes(port, count, resume=resume)
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), 300) as raw, \
            context.wrap_socket(raw, server_hostname="bench") as conn:
        version = str(conn.version())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for dump in sorted(set(out.parent.glob(f"{out.name}.{pid}.*")) - before):
            text = dump.read_text(errors="replace")
            if "\ntotals:" in text or "\nsummary:" in text:
                summary = next(line for line in text.splitlines()
                               if line.startswith(("summary:", "totals:")))
                return int(summary.split()[1]) / count, reused, version
        time.sleep(0.5)
    raise RuntimeError(f"callgrind wrote no dump for {pid}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--handshakes", type=int, default=100)
    parser.add_argument("--servers", default=",".join(["envoy", *HAPROXY_SETTINGS]))
    parser.add_argument("--modes", default="resumed,full")
    parser.add_argument("--keep", metavar="FOLDER",
                        help="write the callgrind dumps there and keep them (for "
                             "callgrind_annotate), instead of a folder removed at the end")
    args = parser.parse_args()
    servers = [s for s in args.servers.split(",") if s]
    unknown = [s for s in servers if s != "envoy"
               and s.removeprefix("other-") not in HAPROXY_SETTINGS]
    if unknown:
        parser.error(f"unknown server: {', '.join(unknown)}")
    versions = [f"{label}: {counting.haproxy_version(other=other)}"
                for label, other, prefix in (("HAProxy", False, "haproxy"),
                                             ("other HAProxy", True, "other-"))
                if any(s.startswith(prefix) for s in servers)]
    ref = measure()
    print(ref.describe())
    print(f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])} (callgrind "
          "counts do not move with it)")
    for line in versions:
        print(line)
    keep = contextlib.nullcontext(args.keep) if args.keep else None
    with keep or tempfile.TemporaryDirectory(prefix="pw-tls-") as tmp, \
            contextlib.ExitStack() as stack:
        folder = Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        dp.certificate(folder)  # ECDSA P-256, as bench/dataplane.py's
        upstream = dp.free_port()
        stack.enter_context(he.process(he._nginx(folder, upstream)))
        he.wait_listening(upstream)
        ports = {name: dp.free_port() for name in servers}
        pids = {}
        for name in servers:
            command = (envoy_command(folder, ports[name], upstream) if name == "envoy"
                       else haproxy_config(folder, name, ports[name], upstream))
            pids[name] = stack.enter_context(counting.under_callgrind(command,
                                                                      folder / f"cg-{name}"))
        for name in servers:
            counting.wait_listening(ports[name], limit_s=900)
        print(f"user-space instructions per handshake (callgrind, {args.handshakes} "
              "connections with one request each, after 20 of warm-up):")
        for mode in args.modes.split(","):
            print(f"  {mode}:")
            counts = {}
            for name in servers:
                counts[name], reused, version = per_handshake(
                    pids[name], folder / f"cg-{name}", ports[name], args.handshakes,
                    resume=mode == "resumed")
                ratio = (f"  envoy/this {counts['envoy'] / counts[name]:.3f}"
                         if "envoy" in counts else "")
                print(f"    {name:22} {counts[name]:12,.0f}  {version}, resumed "
                      f"{reused}/{args.handshakes}{ratio}", flush=True)
            if "envoy" in counts:
                print("    x envoy (envoy's instructions / this one's): " + ", ".join(
                    f"{n} {counts['envoy'] / c:.3f}" for n, c in counts.items()))
    print(ref.check_again())


if __name__ == "__main__":
    main()
