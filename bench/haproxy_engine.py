"""Requests per CPU-second of HAProxy as Podway configures it vs a hand-written static HAProxy.

Issue 26's first target: the HAProxy engine as Podway renders it (``podway.haproxy.render`` of
an Ingress ``shop.test /`` → one Service member) costs no more than 1/0.95 of a hand-written
HAProxy serving the same route. Both run one thread (``nbthread 1``, no master process, so the
measured process is the one doing the work) in front of the same nginx answering a tiny body;
``wrk`` drives each in turn, rounds interleaved, and each figure is requests per CPU-second of
that HAProxy process (``/proc/<pid>/stat`` user+system time over the round), so the load the
other engineers put on this machine moves both alike. Two workloads: HTTP/1.1 keep-alive, and a
new connection per request.

    .venv/bin/python bench/haproxy_engine.py [--rounds 5] [--seconds 3] [--variants]

``--variants`` adds Podway's rendering with each of its per-request rules left out in turn
(path normalisation, X-Forwarded-Proto, X-Real-IP removal, the Host fixes): what each costs.
Each row also gives the median of the per-round ratios to the hand-written file (rounds taken
side by side), steadier than the ratio of medians on a loaded machine.

The machine is shared (about seven engineers on two cores): compare only the two columns of one
run; the machine-speed reference (``bench/speedref.py``) is printed first.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from speedref import measure

from podway.haproxy.render import RenderOptions, render
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.translate import TranslateOptions, translate

HAPROXY = "/usr/sbin/haproxy"
NGINX = "/usr/sbin/nginx"
TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def manifests(backend: int) -> str:
    return f"""apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {{name: podway}}
spec: {{controller: podway.io/ingress-controller}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: shop, namespace: default}}
spec:
  ingressClassName: podway
  rules:
  - host: shop.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
  annotations: {{podway.io/health-check: none}}
spec:
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: {backend}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels: {{kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{{name: http, port: {backend}, protocol: TCP}}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {{ready: true}}
"""


def podway_config(folder: Path, port: int, backend: int) -> Path:
    """Podway's rendering of the route, its files written, listening on ``port``."""
    loaded = load_text(manifests(backend), source="bench")
    ir = translate(Snapshot.of_objects(loaded.objects),
                   TranslateOptions(address="127.0.0.1", http_port=port, https_port=free_port())
                   ).ir
    out = render(ir, RenderOptions(folder=str(folder), runtime_socket=str(folder / "rt.sock")))
    for name, content in out.files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(content, encoding="utf-8")
    config = folder / "haproxy.cfg"
    config.write_text(out.config, encoding="utf-8")
    return config


def static_config(folder: Path, port: int, backend: int) -> Path:
    """What one writes by hand for the same route (host match, one server), sharing idle
    server connections as Podway's does (``http-reuse always``; bench/dataplane.py's
    hand-written HAProxy too)."""
    config = folder / "static.cfg"
    config.write_text(f"""global
  nbthread 1
defaults
  mode http
  http-reuse always
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend shop
  bind 127.0.0.1:{port}
  option forwardfor
  use_backend web if {{ req.hdr(host),lower -m str shop.test }}
backend web
  server s1 127.0.0.1:{backend}
""", encoding="utf-8")
    return config


# Podway's rendering with one of its per-request rules left out or changed (``--variants``):
# what each costs, measured beside the whole rendering and the hand-written file. Each drops
# the lines naming one of its strings; ``podway-no-host-fixes`` keeps the plain Host lookup
# (lower case, port cut); ``podway-lean-choice`` picks the backend straight from the route map
# (no ``txn.be`` variable).
VARIANTS: dict[str, tuple[str, ...]] = {
    "podway-no-normalize": ("normalize-uri",),
    "podway-no-xfp": ("set-header x-forwarded-proto",),
    "podway-no-realip": ("del-header x-real-ip",),
    "podway-no-host-fixes": ("regsub(",),
    "podway-lean-choice": ("set-var(txn.be)",),
}


def variant_config(folder: Path, podway: Path, name: str, port: int, ours: int) -> Path:
    """Podway's rendering (listening on ``port``) changed as ``VARIANTS[name]`` says."""
    text = podway.read_text(encoding="utf-8")
    if name == "podway-no-host-fixes":
        text = text.replace(" unless { req.hdr(host) -m beg [ }", "")
    if name == "podway-lean-choice":
        routes = re.search(r"map_str\(([^)]*routes\.map)\)", text)
        assert routes is not None
        text = text.replace("use_backend %[var(txn.be)] if { var(txn.be) -m found }",
                            f"use_backend %[var(txn.r),map_str({routes.group(1)})]")
    lines = [line for line in text.splitlines()
             if not any(part in line for part in VARIANTS[name]) and "stats socket" not in line]
    config = folder / f"{name}.cfg"
    config.write_text("\n".join(lines).replace(f"bind 127.0.0.1:{ours}", f"bind 127.0.0.1:{port}")
                      + "\n", encoding="utf-8")
    return config


@contextlib.contextmanager
def process(args: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def wait_listening(port: int) -> None:
    for _ in range(200):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.1):
            return
        time.sleep(0.02)
    raise RuntimeError(f"nothing listens on {port}")


def wrk(port: int, seconds: float, *, close: bool) -> int:
    """Requests completed (non-2xx answers count as failures and abort the bench)."""
    args = ["wrk", "-t1", "-c16", f"-d{seconds:g}s", "-H", "Host: shop.test"]
    if close:
        args += ["-H", "Connection: close"]
    out = subprocess.run([*args, f"http://127.0.0.1:{port}/"], capture_output=True, text=True,
                         check=True).stdout
    if "Non-2xx" in out:
        raise RuntimeError(f"failed requests through port {port}:\n{out}")
    match = re.search(r"(\d+) requests in", out)
    if not match:
        raise RuntimeError(f"wrk said:\n{out}")
    return int(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--variants", action="store_true",
                        help="also Podway's rendering without each of its per-request rules")
    args = parser.parse_args()
    for tool in ("wrk", HAPROXY, NGINX):
        if not shutil.which(tool):
            sys.exit(f"{tool} is needed")
    ref = measure()
    print(ref.describe())
    print("machine shared with other engineers (2 cores): compare the columns of this run only")
    with tempfile.TemporaryDirectory(prefix="pw-bench-") as tmp:
        folder = Path(tmp)
        backend = free_port()
        (folder / "nginx.conf").write_text(f"""worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/nginx.err;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {folder}; proxy_temp_path {folder}; fastcgi_temp_path {folder};
  uwsgi_temp_path {folder}; scgi_temp_path {folder};
  server {{ listen 127.0.0.1:{backend}; keepalive_requests 1000000;
           location / {{ return 200 "ok\\n"; }} }}
}}
""", encoding="utf-8")
        ports = {"podway": free_port(), "static": free_port()}
        configs = {"podway": podway_config(folder, ports["podway"], backend),
                   "static": static_config(folder, ports["static"], backend)}
        for name in VARIANTS if args.variants else ():
            ports[name] = free_port()
            configs[name] = variant_config(folder, configs["podway"], name, ports[name],
                                           ports["podway"])
        names = list(configs)
        with contextlib.ExitStack() as stack:
            stack.enter_context(process([NGINX, "-c", str(folder / "nginx.conf"), "-g",
                                         "daemon off;"]))
            pids = {name: stack.enter_context(process([HAPROXY, "-f", str(configs[name])])).pid
                    for name in names}
            for port in (backend, *ports.values()):
                wait_listening(port)
            for close, label in ((False, "HTTP/1.1 keep-alive"),
                                 (True, "new connection per request")):
                measure_workload(names, pids, ports, args, close=close, label=label)
    print(ref.check_again())


def measure_workload(names: list[str], pids: dict[str, int], ports: dict[str, int],
                     args: argparse.Namespace, *, close: bool, label: str) -> None:
    """Interleaved rounds (order rotated each round); per config the median requests per
    CPU-second, and the median of each round's ratio to the hand-written file's."""
    rates: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            before = cpu_seconds(pids[name])
            done = wrk(ports[name], args.seconds, close=close)
            used = cpu_seconds(pids[name]) - before
            rates[name].append(done / used if used > 0 else float("nan"))
    print(f"{label} (median of {args.rounds} interleaved rounds of {args.seconds:g} s; req per "
          "CPU-second of that HAProxy process):")
    static = statistics.median(rates["static"])
    for name in names:
        paired = statistics.median(r / s for r, s in zip(rates[name], rates["static"],
                                                          strict=True))
        median = statistics.median(rates[name])
        print(f"  {name:22} {median:9,.0f}  x hand-written: median {median / static:.2f}, "
              f"paired {paired:.2f}   rounds {', '.join(f'{r:,.0f}' for r in rates[name])}")


if __name__ == "__main__":
    main()
