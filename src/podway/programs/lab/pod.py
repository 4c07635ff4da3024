"""A lab pod's process: ``podway echo`` on every declared container port, in one process.

Run by the lab's kubelet inside the pod's network namespace as
``python -m podway.programs.lab.pod --pod P --namespace NS --node N 80/TCP 53/UDP …``. TCP ports
answer HTTP (the echo JSON names pod, namespace, node and the client address the pod saw); UDP ports
echo, and answer ``whoami`` with the same identity. Prints ``ready`` once every port listens;
SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from podway.tools.echo import Identity
from podway.tools.echo.server import EchoOptions, serve


def parse_ports(specs: list[str]) -> list[tuple[int, str]]:
    out = []
    for spec in specs:
        port, _, proto = spec.partition("/")
        out.append((int(port), (proto or "TCP").upper()))
    return out


async def run(identity: Identity, ports: list[tuple[int, str]]) -> None:
    started = [asyncio.Event() for _ in ports]
    async with asyncio.TaskGroup() as group:
        for (port, proto), event in zip(ports, started, strict=True):
            opts = EchoOptions(address="0.0.0.0", port=port, udp=proto == "UDP",
                               identity=identity)
            group.create_task(serve(opts, started=event), name=f"echo-{port}-{proto}")
        for event in started:
            await event.wait()
        print("ready", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="podway.programs.lab.pod")
    parser.add_argument("--pod", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("ports", nargs="*")
    args = parser.parse_args()
    from podway.base.tasks import run_until_signal

    identity = Identity(name=args.pod, pod=args.pod, namespace=args.namespace, node=args.node)
    try:
        asyncio.run(run_until_signal(run(identity, parse_ports(args.ports))))
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
