"""What a request costs HAProxy as Podway configures it vs a hand-written static HAProxy.

Issue 26's first target: the HAProxy engine as Podway renders it (``podway.haproxy.render`` of
an Ingress ``shop.test /`` → one Service member, on HTTP and on HTTPS) costs no more than
1/0.95 of a hand-written HAProxy serving the same route. Both run one thread (``nbthread 1``,
no master process, so the measured process is the one doing the work) in front of the same
nginx answering a tiny body. Workloads: HTTP/1.1 keep-alive, a new connection per request,
HTTPS keep-alive, a new TLS handshake per request (``--workloads``).

Two hand-written references: ``static``, the file as first written (host match, one server,
``option forwardfor``), and ``static-same``, that file with the guarantees Podway's rendering
gives every request (X-Forwarded-Proto, path normalisation, X-Real-IP dropped, the host
matched with a port or a trailing dot; ``same_config``). Ratios are printed against both.

Two measures:

* default: ``wrk`` drives each config in turn, rounds interleaved; each figure is requests
  per CPU-second of that HAProxy process (``/proc/<pid>/stat`` user+system time over the
  round), with the median of the per-round ratios to the hand-written file ("paired");
* ``--instructions N``: user-space instructions per request, counted exactly by Valgrind's
  callgrind over N requests sent one at a time (``bench/haproxy_instructions.py``; this VM has
  no hardware counters for ``perf stat``). The count does not move with the machine's load:
  what a rule costs shows to a few hundred instructions.

    .venv/bin/python bench/haproxy_engine.py [--rounds 5] [--seconds 3] [--variants]
        [--before SRC] [--instructions N] [--workloads http-keepalive,...] [--any-host]

``--any-host`` serves the route without a host instead (``bench/dataplane.py``'s route:
Podway's ``*`` virtual host alone), and the hand-written files forward every request
(``default_backend``, no Host match).

``--variants`` adds Podway's rendering with each of its per-request rules left out in turn
(path normalisation, X-Forwarded-Proto, X-Real-IP removal, the SNI check where rendered): what
each costs. ``--before SRC`` adds the rendering of another Podway's ``src/`` folder (e.g.
``git archive main src | tar -x -C /tmp/before``): before/after in one run.

The machine is shared (about seven engineers on two cores): compare only the columns of one
run; the machine-speed reference (``bench/speedref.py``) and the load average are printed
first.
"""

from __future__ import annotations

import argparse
import base64
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

import haproxy_instructions as counting
from speedref import measure

from podway.haproxy.render import RenderOptions, render
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.translate import TranslateOptions, translate

(HAPROXY,) = counting.haproxy_command()  # the system's, as the other HAProxy benches
# ``--any-host``: the route has no host (bench/dataplane.py's route, Podway's ``*`` virtual
# host) and the hand-written files have no Host match (``default_backend``).
ANY_HOST = False
NGINX = "/usr/sbin/nginx"
TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def manifests(backend: int, cert: Path, key: Path) -> str:
    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    text = f"""apiVersion: v1
kind: Secret
metadata: {{name: cert, namespace: default}}
type: kubernetes.io/tls
data: {{tls.crt: {b64(cert)}, tls.key: {b64(key)}}}
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {{name: podway}}
spec: {{controller: podway.io/ingress-controller}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  namespace: default
  annotations: {{podway.io/ssl-redirect: "false"}}
spec:
  ingressClassName: podway
  tls: [{{secretName: cert}}]
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
    return text.replace("  - host: shop.test\n    http:", "  - http:") if ANY_HOST else text


def certificate(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    "/CN=shop.test", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def podway_config(folder: Path, ports: tuple[int, int], backend: int) -> Path:
    """Podway's rendering of the route, its files written, listening on ``ports`` (HTTP,
    HTTPS)."""
    loaded = load_text(manifests(backend, folder / "cert.pem", folder / "key.pem"),
                       source="bench")
    ir = translate(Snapshot.of_objects(loaded.objects),
                   TranslateOptions(address="127.0.0.1", http_port=ports[0],
                                    https_port=ports[1])).ir
    out = render(ir, RenderOptions(folder=str(folder), runtime_socket=str(folder / "rt.sock")))
    for name, content in out.files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(content, encoding="utf-8")
    config = folder / "haproxy.cfg"
    config.write_text(out.config, encoding="utf-8")
    return config


def static_config(folder: Path, ports: tuple[int, int], backend: int,
                  name: str = "static") -> Path:
    """What one writes by hand for the same route (host match, one server), sharing idle
    server connections as Podway's does (``http-reuse always``; bench/dataplane.py's
    hand-written HAProxy too)."""
    config = folder / f"{name}.cfg"
    pem = folder / "static.pem"
    pem.write_text((folder / "cert.pem").read_text() + (folder / "key.pem").read_text())
    route = ("default_backend web" if ANY_HOST
             else "use_backend web if { req.hdr(host),lower -m str shop.test }")
    config.write_text(f"""global
  nbthread 1
defaults
  mode http
  http-reuse always
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend shop
  bind 127.0.0.1:{ports[0]}
  bind 127.0.0.1:{ports[1]} ssl crt {pem} alpn h2,http/1.1
  option forwardfor
  {route}
backend web
  server s1 127.0.0.1:{backend}
""", encoding="utf-8")
    return config


def same_config(folder: Path, ports: tuple[int, int], backend: int) -> Path:
    """The hand-written file with the guarantees Podway's rendering gives every request (a
    careful operator's file for the same route, as Envoy's behaves): X-Forwarded-Proto set,
    the path normalised (dot-dot segments, merged slashes; the same conditional rules), a
    client's X-Real-IP dropped, and the host matched with any port or one trailing dot."""
    config = static_config(folder, ports, backend, "static-same")
    text = config.read_text(encoding="utf-8")
    text = text.replace("  nbthread 1\n", "  nbthread 1\n  expose-experimental-directives\n")
    text = text.replace("  option forwardfor\n", """  option forwardfor
  http-request set-header x-forwarded-proto %[ssl_fc,iif(https,http)]
  http-request normalize-uri path-strip-dot if { path_sub /. }
  http-request normalize-uri path-strip-dotdot full if { path_sub /. }
  http-request normalize-uri path-merge-slashes if { path_sub // }
  http-request del-header x-real-ip
""").replace("req.hdr(host),lower -m str shop.test }",
             "req.hdr(host),lower,field(1,:) -m str shop.test shop.test. }")
    config.write_text(text, encoding="utf-8")
    return config


# Podway's rendering with one of its per-request rules left out (``--variants``): what each
# costs, measured beside the whole rendering and the hand-written file. Each drops the lines
# naming one of its strings (a variant that drops nothing is not run: the rule is gone).
VARIANTS: dict[str, tuple[str, ...]] = {
    "podway-no-normalize": ("normalize-uri",),
    "podway-no-xfp": ("set-header x-forwarded-proto",),
    "podway-no-realip": ("del-header x-real-ip",),
    "podway-no-sni-check": ("txn.sc", "txn.vc"),
}


def variant_config(folder: Path, podway: Path, name: str, ports: tuple[int, int],
                   ours: tuple[int, int]) -> Path | None:
    """Podway's rendering (listening on ``ports``) changed as ``VARIANTS[name]`` says; None
    when the rendering has no such rule."""
    text = podway.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines()
             if not any(part in line for part in VARIANTS[name]) and "stats socket" not in line]
    if len(lines) == len(text.splitlines()) - 1:
        return None
    config = folder / f"{name}.cfg"
    text = "\n".join(lines) + "\n"
    for mine, theirs in zip(ours, ports, strict=True):
        text = text.replace(f"bind 127.0.0.1:{mine}", f"bind 127.0.0.1:{theirs}")
    config.write_text(text, encoding="utf-8")
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
    """The process's time on a CPU (user and system), in nanoseconds from the scheduler
    (``/proc/<pid>/task/*/schedstat``, every thread): utime and stime come in 10 ms ticks,
    ±10-25 % of a round when the machine is loaded and each HAProxy gets little CPU."""
    try:
        return sum(int((task / "schedstat").read_text().split()[0])
                   for task in Path(f"/proc/{pid}/task").iterdir()) / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def wait_listening(port: int) -> None:
    for _ in range(200):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.1):
            return
        time.sleep(0.02)
    raise RuntimeError(f"nothing listens on {port}")


WORKLOADS = {  # name: (label, TLS, a new connection per request)
    "http-keepalive": ("HTTP/1.1 keep-alive", False, False),
    "http-newconn": ("new connection per request", False, True),
    "https-keepalive": ("HTTPS keep-alive", True, False),
    "https-newconn": ("new TLS handshake per request", True, True),
}


def wrk(port: int, seconds: float, *, tls: bool, close: bool) -> int:
    """Requests completed (non-2xx answers count as failures and abort the bench)."""
    args = ["wrk", "-t1", "-c16", f"-d{seconds:g}s", "-H", "Host: shop.test"]
    if close:
        args += ["-H", "Connection: close"]
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/"
    out = subprocess.run([*args, url], capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out:
        raise RuntimeError(f"failed requests through port {port}:\n{out}")
    match = re.search(r"(\d+) requests in", out)
    if not match:
        raise RuntimeError(f"wrk said:\n{out}")
    return int(match.group(1))


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--variants", action="store_true",
                        help="also Podway's rendering without each of its per-request rules")
    parser.add_argument("--before", metavar="SRC",
                        help="also the rendering of the Podway whose src/ folder this is "
                             "(e.g. a worktree of main): before/after side by side")
    parser.add_argument("--instructions", type=int, metavar="N", default=0,
                        help="count instructions per request over N requests (callgrind) "
                             "instead of requests per CPU-second")
    parser.add_argument("--nginx", action="store_true",
                        help="with --instructions: nginx as a reverse proxy beside them")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--any-host", action="store_true",
                        help="the route without host (bench/dataplane.py's): Podway's `*` "
                             "virtual host; the hand-written files without a Host match")
    parser.add_argument("--render-only", nargs=4, metavar=("FOLDER", "HTTP", "HTTPS", "BACKEND"),
                        help=argparse.SUPPRESS)  # used by --before, in the other Podway
    return parser.parse_args()


def _nginx(folder: Path, backend: int) -> list[str]:
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
    return [NGINX, "-c", str(folder / "nginx.conf"), "-g", "daemon off;"]


def _before(src: str, folder: Path, ports: tuple[int, int], backend: int) -> Path:
    """The other Podway's rendering (this script run with its src first on the path)."""
    sub = folder / "before"
    sub.mkdir()
    for name in ("cert.pem", "key.pem"):
        shutil.copy(folder / name, sub / name)
    env = {**os.environ, "PYTHONPATH": f"{src}:{Path(__file__).parent}"}
    subprocess.run([sys.executable, __file__, "--render-only", str(sub), str(ports[0]),
                    str(ports[1]), str(backend), *(["--any-host"] if ANY_HOST else [])],
                   check=True, env=env)
    return sub / "haproxy.cfg"


def _configs(args: argparse.Namespace, folder: Path, backend: int
             ) -> tuple[dict[str, Path], dict[str, tuple[int, int]]]:
    ports = {"podway": (free_port(), free_port()), "static": (free_port(), free_port()),
             "static-same": (free_port(), free_port())}
    configs = {"podway": podway_config(folder, ports["podway"], backend),
               "static": static_config(folder, ports["static"], backend),
               "static-same": same_config(folder, ports["static-same"], backend)}
    if args.before:
        ports["before"] = (free_port(), free_port())
        configs["before"] = _before(args.before, folder, ports["before"], backend)
    for name in VARIANTS if args.variants else ():
        ports[name] = (free_port(), free_port())
        found = variant_config(folder, configs["podway"], name, ports[name], ports["podway"])
        if found is None:
            print(f"{name}: the rendering has no such rule (left out)")
            del ports[name]
        else:
            configs[name] = found
    return configs, ports


def main() -> None:
    args = _arguments()
    global ANY_HOST  # noqa: PLW0603 (one switch read by the config writers)
    ANY_HOST = args.any_host
    if args.render_only:
        folder, http, https, backend = args.render_only
        podway_config(Path(folder), (int(http), int(https)), int(backend))
        return
    for tool in ("wrk", HAPROXY, NGINX, "valgrind" if args.instructions else "wrk"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is needed")
    ref = measure()
    print(ref.describe())
    print(f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}; machine "
          "shared with other engineers (2 cores): compare the columns of this run only")
    with tempfile.TemporaryDirectory(prefix="pw-bench-") as tmp:
        folder = Path(tmp)
        certificate(folder)
        backend = free_port()
        configs, ports = _configs(args, folder, backend)
        workloads = [w for w in args.workloads.split(",") if w]
        with contextlib.ExitStack() as stack:
            stack.enter_context(process(_nginx(folder, backend)))
            wait_listening(backend)
            if args.instructions:
                count_instructions(stack, configs, ports, args, workloads=workloads, folder=folder,
                                   backend=backend)
            else:
                pids = {name: stack.enter_context(process([HAPROXY, "-f", str(path)])).pid
                        for name, path in configs.items()}
                for pair in ports.values():
                    wait_listening(pair[0])
                for workload in workloads:
                    measure_workload(list(configs), pids, ports, args, workload)
    print(ref.check_again())


def _nginx_proxy(folder: Path, ports: tuple[int, int], backend: int) -> Path:
    """nginx as the reverse proxy of ``bench/dataplane.py`` (one process, upstream
    keep-alive), on HTTP and HTTPS, for ``--instructions --nginx``."""
    conf = folder / "nginx-proxy.conf"
    conf.write_text(f"""worker_processes 1;
master_process off;
daemon off;
pid {folder}/nginx-proxy.pid;
error_log {folder}/nginx-proxy.err;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {folder}; proxy_temp_path {folder}; fastcgi_temp_path {folder};
  uwsgi_temp_path {folder}; scgi_temp_path {folder};
  upstream up {{ server 127.0.0.1:{backend}; keepalive 32; }}
  server {{
    listen 127.0.0.1:{ports[0]};
    listen 127.0.0.1:{ports[1]} ssl;
    ssl_certificate {folder}/cert.pem; ssl_certificate_key {folder}/key.pem;
    location / {{ proxy_pass http://up; proxy_http_version 1.1;
                 proxy_set_header Connection ""; }}
  }}
}}
""", encoding="utf-8")
    return conf


def count_instructions(stack: contextlib.ExitStack, configs: dict[str, Path],
                       ports: dict[str, tuple[int, int]], args: argparse.Namespace,
                       *, workloads: list[str], folder: Path, backend: int) -> None:
    """Per config and workload, user-space instructions per request (exact, load-free)."""
    commands = {name: [HAPROXY, "-f", str(path)] for name, path in configs.items()}
    if args.nginx:  # nginx as a reverse proxy beside them (issue 26: >= 0.9x nginx)
        ports["nginx-proxy"] = (free_port(), free_port())
        commands["nginx-proxy"] = [NGINX, "-c", str(_nginx_proxy(folder, ports["nginx-proxy"],
                                                               backend))]
    pids = {name: stack.enter_context(counting.under_callgrind(command, folder / f"cg-{name}"))
            for name, command in commands.items()}
    for pair in ports.values():
        counting.wait_listening(pair[0])
        counting.wait_listening(pair[1])
    print(f"user-space instructions per request of each proxy process (callgrind, "
          f"{args.instructions} requests after 50 of warm-up, one connection at a time):")
    for workload in workloads:
        label, tls, close = WORKLOADS[workload]
        counts = {name: counting.per_request(pids[name], folder / f"cg-{name}",
                                             ports[name][tls], args.instructions, tls=tls,
                                             close=close)
                  for name in commands}
        print(f"  {label}:")
        for name, count in counts.items():
            print(f"    {name:22} {count:11,.0f}  x hand-written "
                  f"{counts['static'] / count:.3f}, x same guarantees "
                  f"{counts['static-same'] / count:.3f}")


def measure_workload(names: list[str], pids: dict[str, int],
                     ports: dict[str, tuple[int, int]], args: argparse.Namespace,
                     workload: str) -> None:
    """Interleaved rounds (order rotated each round); per config the median requests per
    CPU-second, and the median of each round's ratio to the hand-written file's."""
    label, tls, close = WORKLOADS[workload]
    rates: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            before = cpu_seconds(pids[name])
            done = wrk(ports[name][tls], args.seconds, tls=tls, close=close)
            used = cpu_seconds(pids[name]) - before
            rates[name].append(done / used if used > 0 else float("nan"))
    print(f"{label} (median of {args.rounds} interleaved rounds of {args.seconds:g} s; req per "
          "CPU-second of that HAProxy process):")
    static = statistics.median(rates["static"])
    for name in names:
        paired = statistics.median(r / s for r, s in zip(rates[name], rates["static"],
                                                          strict=True))
        same = statistics.median(r / s for r, s in zip(rates[name], rates["static-same"],
                                                        strict=True))
        median = statistics.median(rates[name])
        print(f"  {name:22} {median:9,.0f}  x hand-written: median {median / static:.2f}, "
              f"paired {paired:.2f}; x same guarantees paired {same:.2f}   rounds "
              f"{', '.join(f'{r:,.0f}' for r in rates[name])}")


if __name__ == "__main__":
    main()
