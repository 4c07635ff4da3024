"""Controller failover benchmark: two ``podway controller`` processes, one real Envoy engine
given both xDS addresses, requests through it; the leader is stopped and the figures printed.

Per trial (the API emulator and an echo backend run in this process):

* ``SIGKILL`` (a crash) or ``SIGTERM`` (a clean stop, ``--graceful``) of the leader, which the
  engine is connected to, under load (a new connection per request, back to back);
* failed requests from the stop until 50 requests after the new leader wrote;
* takeover: stop → the other replica holds the Lease;
* reconnect: stop → the engine's stream is on the other replica (its ``podway_xds_streams``);
* pending status: stop → the status of a Service created just after the stop is written.

    python bench/controller_failover.py [--trials 3] [--lease 6] [--graceful]

Expected: 0 failed requests; takeover ≈ lease + up to 2.2 retry periods after a crash, about
one retry period after a clean stop (the leader hands the Lease back).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from xds_push import free_port  # the same helper, one copy

from podway.envoy.engine.bootstrap import BootstrapOptions, bootstrap
from podway.envoy.engine.process import Engine, EngineOptions, find_envoy
from podway.kube.emulator import KubeEmulator
from podway.programs.demo import read_response
from podway.tools.echo import Identity
from podway.tools.echo.server import EchoOptions, serve

RETRY_S = 0.3


def objects(lb_port: int, backend: int, name: str = "web") -> list[tuple[str, Any, str | None]]:
    return [
        ("services", {"apiVersion": "v1", "kind": "Service",
                      "metadata": {"name": name, "namespace": "default"},
                      "spec": {"type": "LoadBalancer", "selector": {"app": name}, "ports": [
                          {"name": "http", "port": lb_port, "targetPort": backend,
                           "protocol": "TCP"}]}}, None),
        ("endpointslices", {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                            "metadata": {"name": f"{name}-1", "namespace": "default",
                                         "labels": {"kubernetes.io/service-name": name}},
                            "addressType": "IPv4", "ports": [
                                {"name": "http", "port": backend, "protocol": "TCP"}],
                            "endpoints": [{"addresses": ["127.0.0.1"],
                                           "conditions": {"ready": True}}]},
         "discovery.k8s.io"),
    ]


def start(name: str, kubeconfig: Path, lease_s: int, log: Path, *,
          xds: str = "") -> tuple[subprocess.Popen[bytes], str, int]:
    xds, metrics = xds or f"127.0.0.1:{free_port()}", free_port()
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "podway", "controller", "--kubeconfig", str(kubeconfig),
             "--xds-listen", xds, "--xds-unauthenticated", "--backend-mode", "clusterip",
             "--address", "127.0.0.1", "--metrics-port", str(metrics), "--metrics-address",
             "127.0.0.1", "--identity", name, "--lease-namespace", "default",
             "--lease-duration-s", str(lease_s), "--renew-deadline-s", str(lease_s * 2 / 3),
             "--retry-period-s", str(RETRY_S), "--log-level", "warning"],
            stdout=out, stderr=subprocess.STDOUT, env=env)
    return proc, xds, metrics


async def http(port: int, path: str, host: str = "x") -> tuple[int, bytes]:
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                         .encode())
            return await read_response(reader)
        finally:
            writer.close()


async def streams(port: int) -> float:
    with contextlib.suppress(OSError, TimeoutError):
        _, body = await http(port, "/metrics")
        for line in body.decode().splitlines():
            if line.startswith("podway_xds_streams "):
                return float(line.split()[-1])
    return -1.0


async def until(check: Any, limit_s: float = 60.0) -> float:
    """Wait for an (async or plain) check; the monotonic time it first held."""
    async with asyncio.timeout(limit_s):
        while True:
            held = check()
            if asyncio.iscoroutine(held):
                held = await held
            if held:
                return time.monotonic()
            await asyncio.sleep(0.01)


def write_kubeconfig(path: Path, url: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "e", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "e", "context": {"cluster": "e", "user": "u"}}],
        "current-context": "e"}))
    return path


class Load:
    """Requests back to back through the engine, a new connection each; counts failures."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sent = 0
        self.failed = 0

    async def run(self) -> None:
        while True:  # until cancelled
            self.sent += 1
            try:
                status, _ = await http(self.port, "/", "web.test")
                self.failed += status != 200
            except (OSError, TimeoutError, asyncio.IncompleteReadError):
                self.failed += 1


async def trial(lease_s: int, graceful: bool, root: Path) -> dict[str, float]:
    async with KubeEmulator() as emu:
        kubeconfig = write_kubeconfig(root / "kubeconfig", emu.url)
        backend, lb_port = free_port(), free_port()
        started = asyncio.Event()
        tasks = [asyncio.create_task(serve(EchoOptions(port=backend, identity=Identity(
            name="pod")), started=started), name="echo")]
        await started.wait()
        for plural, obj, group in objects(lb_port, backend):
            emu.put(plural, obj, group=group)
        procs: list[subprocess.Popen[bytes]] = []

        def holder() -> str:
            lease = emu.get("leases", "default", "podway-controller",
                            group="coordination.k8s.io") or {}
            return str((lease.get("spec") or {}).get("holderIdentity") or "")

        try:
            a, a_xds, a_metrics = start("ctl-a", kubeconfig, lease_s, root / "a.log")
            procs.append(a)
            await until(lambda: holder() == "ctl-a")
            b_xds = f"127.0.0.1:{free_port()}"  # not listening yet: the engine lands on a
            engine = Engine(EngineOptions(envoy_path=find_envoy(), drain_s=0,
                                          bootstrap=bootstrap(BootstrapOptions(
                                              node_id="edge", xds=(a_xds, b_xds)))))
            tasks.append(asyncio.create_task(engine.run(), name="engine"))
            await engine.wait_ready(limit_s=60)
            await until(lambda: _is(streams(a_metrics), 1.0))
            b, _, b_metrics = start("ctl-b", kubeconfig, lease_s, root / "b.log", xds=b_xds)
            procs.append(b)
            await until(lambda: _is(streams(b_metrics), 0.0))  # b serves, no engine on it
            load = Load(lb_port)
            tasks.append(asyncio.create_task(load.run(), name="load"))
            await until(lambda: load.sent > 50)
            t0 = time.monotonic()
            a.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
            for plural, obj, group in objects(free_port(), backend, "late")[:1]:
                emu.put(plural, obj, group=group)

            def written() -> bool:
                obj = emu.get("services", "default", "late") or {}
                return bool(((obj.get("status") or {}).get("loadBalancer") or {}).get(
                    "ingress"))

            took, moved, status = await asyncio.gather(  # each timed on its own
                until(lambda: holder() == "ctl-b"),
                until(lambda: _is(streams(b_metrics), 1.0)), until(written))
            mark = load.sent
            await until(lambda: load.sent > mark + 50)
            return {"takeover_s": took - t0, "reconnect_s": moved - t0,
                    "status_s": status - t0, "failed": load.failed, "requests": load.sent}
        finally:
            for proc in procs:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=30)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def _is(value: Any, wanted: float) -> bool:
    return bool(await value == wanted)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--lease", type=int, default=6, help="lease duration, seconds")
    parser.add_argument("--graceful", action="store_true", help="SIGTERM instead of SIGKILL")
    args = parser.parse_args()
    how = "SIGTERM (clean stop)" if args.graceful else "SIGKILL (crash)"
    print(f"leader stopped with {how}; lease {args.lease} s, renew deadline "
          f"{args.lease * 2 / 3:.1f} s, retry {RETRY_S} s")
    results = []
    for n in range(args.trials):
        with tempfile.TemporaryDirectory(prefix="podway-failover-") as folder:
            result = await trial(args.lease, args.graceful, Path(folder))
        results.append(result)
        print(f"trial {n + 1}: {int(result['failed'])} failed of {int(result['requests'])} "
              f"requests; takeover {result['takeover_s']:.2f} s, engine on the other replica "
              f"{result['reconnect_s']:.2f} s, pending status written {result['status_s']:.2f} s",
              flush=True)
    worst = max(r["takeover_s"] for r in results)
    print(f"total: {int(sum(r['failed'] for r in results))} failed of "
          f"{int(sum(r['requests'] for r in results))}; worst takeover {worst:.2f} s")


if __name__ == "__main__":
    asyncio.run(main())
