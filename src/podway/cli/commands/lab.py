"""``podway lab``: a Kubernetes-like cluster on this machine (network namespaces as nodes and
pods), Podway's agent, controller and engine in it, and a client outside it.

``up`` builds it and starts the lab daemon; ``apply``/``get``/``status`` talk to its API;
``curl`` sends requests from the client namespace; ``compare`` measures the three backend modes
side by side; ``down`` removes everything. See docs/lab.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from podway.base.errors import ConfigError, EnvironmentProblem

if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status

lab_app = typer.Typer(name="lab", help="A multi-node cluster on this machine (root).",
                      no_args_is_help=True)

NameOpt = Annotated[str, typer.Option("--name", help="Lab name (several labs can coexist).")]
StateOpt = Annotated[Path | None, typer.Option(
    "--state-dir", help="State folder (default /run/podway/lab/NAME).")]


def register(app: typer.Typer) -> None:
    app.add_typer(lab_app)


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise EnvironmentProblem(f"podway lab {what} needs root (it creates network namespaces "
                                 "and kernel rules): run it with sudo")
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            raise EnvironmentProblem(f"podway lab needs `{tool}` (install {package})")


def _state(name: str, state_dir: Path | None) -> Any:
    from podway.programs.lab.state import LabState

    return LabState.of(name, state_dir)


def which(name: str, state_dir: Path | None) -> str:
    """The flags that name this lab again in a hint (``--name X``, ``--state-dir D``), so every
    command a hint suggests reaches the same lab; empty for the default lab."""
    import shlex

    flags = ([] if name == "lab" else ["--name", name]) + (
        [] if state_dir is None else ["--state-dir", str(state_dir)])
    return "".join(" " + shlex.quote(f) for f in flags)


def next_steps(name: str, state_dir: Path | None, kubeconfig: Path) -> list[str]:
    """What to run once the lab is up (every command names this lab)."""
    lab = which(name, state_dir)
    return [f"kubectl --kubeconfig {kubeconfig} get nodes",
            f"podway lab apply{lab} -f examples/seed-httpd/ && podway lab status{lab}"]


def _running(name: str, state_dir: Path | None) -> tuple[Any, Any, int]:
    state = _state(name, state_dir)
    if not state.info.exists():
        raise EnvironmentProblem(f"no lab {name!r} is up (start one with "
                                 f"`podway lab up{which(name, state_dir)}`)")
    plan, port = state.load()
    return state, plan, port


@lab_app.command()
def up(nodes: Annotated[int, typer.Option(help="Number of nodes.")] = 3,
       name: NameOpt = "lab", state_dir: StateOpt = None,
       image: Annotated[Path | None, typer.Option(
           help="Podway's OCI image archive (./dev image): pods whose image is "
                "podway:<its tag> run from it as containers (runc).")] = None,
       install: Annotated[bool, typer.Option(
           "--install", help="Install Podway's Helm chart into the lab (from the image: "
                             "--image, default build/podway-image.tar) instead of running "
                             "the lab's own controller, engine and agents.")] = False,
       install_engine: Annotated[str, typer.Option(
           help="With --install: the engine group's engine (envoy, haproxy or kernel).")
       ] = "envoy",
       install_reachability: Annotated[str, typer.Option(
           help="With --install: how the client reaches the VIPs: none (the edge router routes "
                "the pool to the engine node) or l2 (the chart's L2 mode answers ARP for them "
                "on the nodes' segment).")] = "none") -> None:
    """Build the lab: fabric, nodes, edge, client; start its control plane, agents, controller
    and engine (or, with --install, install the chart)."""
    from rich.console import Console

    from podway.programs.lab import network
    from podway.programs.lab.plan import make_plan

    _need_root("up")
    try:
        plan = make_plan(name, nodes)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    image = _image_for(image, install=install)
    _check_install(install_engine, install_reachability)
    state = _state(name, state_dir)
    leftovers = network.namespaces(plan.prefix)
    if state.exists() or leftovers:
        found = ", ".join([*([str(state.root)] if state.exists() else []), *leftovers[:3]])
        raise EnvironmentProblem(f"leftovers of an earlier lab {name!r} ({found}"
                                 f"{', …' if len(leftovers) > 3 else ''}): run `podway lab down"
                                 f"{which(name, state_dir)}` first")
    console = Console(stderr=True, log_path=False)
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    state.create(plan, port)
    if image is not None:
        state.image_file.write_text(f"{image.resolve()}\n")
    if install:
        state.chart_marker.write_text("podway\n")
    try:
        with console.status("building the network") as status:
            def step(what: str) -> None:
                status.update(f"network: {what}")
                console.log(f"network: {what}")

            network.build(plan, step=step)
            _start_daemon(state, status=status, console=console)
            if install and image is not None:
                from podway.programs.lab.container import archive_tag as tag_of
                from podway.programs.lab.install import install as install_chart

                install_chart(state, plan, tag_of(image), engine=install_engine,
                              reachability=install_reachability, say=step)
    except BaseException:
        _down(name, state_dir, say=lambda _: None)
        raise
    from podway.programs.lab.plan import CLIENT_IP, VIP

    console.print(f"[bold green]lab {name!r} is up[/]: {nodes} nodes, VIP {VIP}, client "
                  f"{CLIENT_IP}")
    for line in next_steps(name, state_dir, state.kubeconfig):
        console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)


def _check_install(engine: str, reachability: str) -> None:
    if engine not in ("envoy", "haproxy", "kernel"):
        raise ConfigError(f"--install-engine must be envoy, haproxy or kernel, not {engine!r}")
    if reachability not in ("none", "l2"):
        raise ConfigError(f"--install-reachability must be none or l2, not {reachability!r}")


def _image_for(image: Path | None, *, install: bool) -> Path | None:
    """The image archive pods run from: ``--image``, or with ``--install`` the one ``./dev
    image`` builds; checked (tools, a tagged OCI archive) or refused in one line."""
    if install and image is None:
        image = Path("build/podway-image.tar")
        if not image.exists():
            raise EnvironmentProblem("--install runs the chart's pods from Podway's image: build "
                                     "it (./dev image) or give --image (the lab's process runner "
                                     "cannot run them)")
    if image is not None:
        from podway.programs.lab.container import archive_tag
        from podway.programs.lab.container_volumes import ContainerError

        if shutil.which("umoci") is None:
            raise EnvironmentProblem("--image needs `umoci` (apt-get install umoci)")
        if shutil.which("runc") is None and shutil.which("crun") is None:
            raise EnvironmentProblem("--image needs an OCI runtime (apt-get install runc)")
        try:
            archive_tag(image)
        except (OSError, ContainerError) as exc:
            raise ConfigError(f"--image {image}: {exc}") from None
    return image


def _start_daemon(state: Any, *, status: Status, console: Console) -> None:
    """Start the lab daemon (detached: it outlives this command) and follow its progress
    lines until it says ``ready``; an ``error:`` line or an early exit is an EnvironmentProblem."""
    from podway.base.children import isolation_flags

    status.update("starting the lab daemon")
    log = open(state.logs / "daemon.stderr", "ab")  # noqa: SIM115 (outlives with)
    proc = subprocess.Popen([sys.executable, *isolation_flags(), "-m",
                             "podway.programs.lab.daemon", str(state.root)],
                            stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                            start_new_session=True, text=True)
    log.close()
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.strip()
        if line == "ready":
            break
        if line.startswith("error:"):
            raise EnvironmentProblem(f"the lab daemon failed: {line[6:].strip()}")
        status.update(line)
        console.log(line)
    else:
        raise EnvironmentProblem("the lab daemon exited while starting (see "
                                 f"{state.logs}/daemon.log)")
    proc.stdout.close()


def _down(name: str, state_dir: Path | None, *, say: Any) -> int:
    from podway.programs.lab import network
    from podway.programs.lab.state import alive, kill

    state = _state(name, state_dir)
    removed = 0
    pid = state.daemon()
    if pid is not None:
        kill(pid)
        deadline = time.monotonic() + 20
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive(pid):
            import signal
            kill(pid, signal.SIGKILL)
        say(f"stopped the lab daemon (pid {pid})")
        removed += 1
    for what, other in state.recorded().items():
        if alive(other):
            import signal
            kill(other, signal.SIGKILL)
            say(f"killed {what} (pid {other})")
            removed += 1
    prefix = f"pwlab-{name}"
    for ns in network.namespaces(prefix):
        network.remove_ns(ns)
        removed += 1
    if network.namespaces(prefix):
        say(f"error: namespaces left: {', '.join(network.namespaces(prefix))}")
    if state.exists():
        from podway.programs.lab.container import release

        release(state.root)  # unmounts the containers' writable roots first
        removed += 1
    return removed


@lab_app.command()
def down(name: NameOpt = "lab", state_dir: StateOpt = None) -> None:
    """Remove every namespace, link, rule, process and file of the lab (idempotent)."""
    _need_root("down")
    removed = _down(name, state_dir, say=typer.echo)
    typer.echo(f"lab {name!r} removed" if removed else f"lab {name!r}: nothing to remove")


@lab_app.command()
def upgrade(name: NameOpt = "lab", state_dir: StateOpt = None,
            pod_annotation: Annotated[list[str] | None, typer.Option(
                help="KEY=VALUE on every pod the chart runs (podAnnotations); default "
                     "lab-upgrade=<current time>, which rolls every workload.")] = None,
            ) -> None:
    """``helm upgrade`` of the chart a ``lab up --install`` installed, in place: the same
    values with the given pod annotations; each workload rolls by its update strategy."""
    import time

    from podway.programs.lab.install import upgrade as upgrade_chart

    state, _, _ = _running(name, state_dir)
    given = pod_annotation or [f"lab-upgrade={time.strftime('%Y%m%dT%H%M%S')}"]
    pairs = [item.partition("=") for item in given]
    if any(not sep or not k for k, sep, _ in pairs):
        raise ConfigError("--pod-annotation takes KEY=VALUE")
    upgrade_chart(state, pod_annotations={k: v for k, _, v in pairs})
    typer.echo("upgraded: every workload rolls (podway lab kubectl" + which(name, state_dir)
               + " -- rollout status -n podway deploy/podway-controller)")


@lab_app.command()
def apply(file: Annotated[Path, typer.Option("-f", "--filename", help="YAML file or folder.")],
          name: NameOpt = "lab", state_dir: StateOpt = None) -> None:
    """Create or update the objects in FILE (or every *.yaml/*.yml in a folder)."""
    import yaml

    from podway.programs.lab.api import LabApi

    state, _, _ = _running(name, state_dir)
    if not file.exists():
        raise ConfigError(f"-f {file}: no such file or folder")
    files = sorted(p for p in file.iterdir() if p.suffix in (".yaml", ".yml")) \
        if file.is_dir() else [file]
    api = LabApi.of(state)
    for path in files:
        try:
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not YAML ({str(exc).splitlines()[0]})") from None
        for doc in docs:
            if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
                raise ConfigError(f"{path}: every document needs apiVersion and kind")
            typer.echo(api.apply(doc))


@lab_app.command()
def get(kind: Annotated[str, typer.Argument(help="pods, services, deploy, ingress, …")],
        output: Annotated[str, typer.Option("-o", "--output", help="json or yaml")] = "",
        namespace: Annotated[str | None, typer.Option("-n", "--namespace")] = None,
        name: NameOpt = "lab", state_dir: StateOpt = None) -> None:
    """List objects of KIND (all namespaces unless -n), like kubectl get."""
    import yaml

    from podway.programs.lab.api import LabApi

    state, _, _ = _running(name, state_dir)
    api = LabApi.of(state)
    items = api.list(api.kind(kind), namespace)
    if output in ("json", "yaml"):
        doc = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
               "items": items}
        typer.echo(json.dumps(doc, indent=2) if output == "json"
                   else yaml.safe_dump(doc, sort_keys=False))
        return
    if output:
        raise ConfigError(f"-o must be json or yaml, not {output!r}")
    for item in items:
        meta = item["metadata"]
        ns = meta.get("namespace")
        typer.echo(f"{ns + '/' if ns else ''}{meta['name']}")


@lab_app.command()
def status(name: NameOpt = "lab", state_dir: StateOpt = None,
           output: Annotated[str | None, typer.Option(
               "-o", "--output", help="json: the same sections as JSON.")] = None) -> None:
    """Nodes, pods with IPs and NodePortLocal mappings, Services with VIPs, lab processes."""
    from podway.cli.commands.common import check_output, stdout_console
    from podway.programs.lab.api import LabApi
    from podway.programs.lab.report import status_sections, table_of

    as_json = check_output("-o", output) == "json"
    state, _plan, _ = _running(name, state_dir)
    sections = status_sections(LabApi.of(state), state)
    if as_json:
        typer.echo(json.dumps(sections, indent=2))
        return
    console = stdout_console()
    for title, rows in sections.items():
        console.print(table_of(title, rows))


@lab_app.command()
def curl(url: Annotated[str, typer.Argument(help="http://HOST[:PORT]/PATH")],
         times: Annotated[int, typer.Option(help="Send this many requests.")] = 1,
         header_host: Annotated[str, typer.Option("--host", help="Host header.")] = "",
         name: NameOpt = "lab", state_dir: StateOpt = None) -> None:
    """Send requests from the client namespace (outside the cluster); with --times N > 1,
    print how many answers came from each pod."""
    from collections import Counter

    from podway.programs.agent.netns import single_thread
    from podway.programs.lab.traffic import parse_url, request

    _need_root("curl")
    _, plan, _ = _running(name, state_dir)
    if times < 1:
        raise ConfigError(f"--times must be at least 1, not {times}")
    target = parse_url(url)
    pool = single_thread(netns=plan.client, name="lab-curl")
    try:
        replies = [pool.submit(request, target, host_header=header_host).result()
                   for _ in range(times)]
    finally:
        pool.shutdown()
    failed = [r for r in replies if not r.ok]
    if times == 1:
        reply = replies[0]
        if reply.status:
            typer.echo(reply.body.rstrip())
        if not reply.ok:
            raise EnvironmentProblem(f"{url}: {reply.error or f'HTTP {reply.status}'}")
        return
    seen = Counter(str(r.echo().get("pod") or "?") for r in replies if r.ok)
    for pod, count in sorted(seen.items()):
        typer.echo(f"{count:6d}  {pod}")
    if failed:
        typer.echo(f"{len(failed):6d}  failed ({failed[0].error or failed[0].status})")
        raise typer.Exit(1)


def account_user(account: str) -> str:
    """``NAMESPACE/NAME`` → ``system:serviceaccount:NAMESPACE:NAME``; any other user name as it
    is (``kubectl --as`` takes both)."""
    ns, slash, sa = account.partition("/")
    if not slash:
        return account
    if not ns or not sa or "/" in sa:
        raise ConfigError(f"--as {account!r}: write a ServiceAccount as NAMESPACE/NAME")
    return f"system:serviceaccount:{ns}:{sa}"


@lab_app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def kubectl(ctx: typer.Context,
            as_: Annotated[str | None, typer.Option(
                "--as", help="Act as this ServiceAccount (NAMESPACE/NAME) or user: the lab's "
                             "API holds the request to its RBAC.")] = None,
            name: NameOpt = "lab", state_dir: StateOpt = None) -> None:
    """Run kubectl against the lab (its kubeconfig; the administrator unless --as). Put
    kubectl's own arguments after ``--``: podway lab kubectl --as podway/podway-agent -- get
    secrets -n podway."""
    state, _, _ = _running(name, state_dir)
    if shutil.which("kubectl") is None:
        raise EnvironmentProblem("kubectl is not installed")
    argv = ["kubectl", "--kubeconfig", str(state.kubeconfig)]
    if as_:
        argv += ["--as", account_user(as_)]
    raise typer.Exit(subprocess.run([*argv, *ctx.args], check=False).returncode)


@lab_app.command("restart-api")
def restart_api(name: NameOpt = "lab", state_dir: StateOpt = None) -> None:
    """Restart the lab's control plane from its state on disk (clients re-list)."""
    import signal

    state, _, _ = _running(name, state_dir)
    pid = state.daemon()
    if pid is None:
        lab = which(name, state_dir)
        raise EnvironmentProblem(f"the lab daemon is not running (run `podway lab down{lab}`, "
                                 f"then `podway lab up{lab}`)")
    def count() -> str:
        return state.api_restarts.read_text() if state.api_restarts.exists() else "0"

    before = count()
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + 30
    while count() == before:
        if time.monotonic() > deadline:
            raise EnvironmentProblem("the control plane did not restart within 30 s (see "
                                     f"{state.logs}/daemon.log)")
        time.sleep(0.05)
    typer.echo("control plane restarted from disk")


@lab_app.command()
def compare(requests: Annotated[int, typer.Option(help="Requests per mode.")] = 200,
            service: Annotated[str, typer.Option(help="NAMESPACE/NAME of the Service.")]
            = "default/lb-httpd",
            as_json: Annotated[bool, typer.Option("--json", help="Print JSON (as -o json).")]
            = False,
            output: Annotated[str | None, typer.Option(
                "-o", "--output", help="json: print JSON instead of the table.")] = None,
            plot: Annotated[Path | None, typer.Option(help="Write a PNG chart here.")] = None,
            name: NameOpt = "lab", state_dir: StateOpt = None) -> None:
    """Send N requests through each backend mode, side by side, and compare balance, client
    address, second hops, latency and traffic to nodes without a pod."""
    from rich.console import Console

    from podway.cli.commands.common import check_output, stdout_console
    from podway.programs.agent.netns import single_thread
    from podway.programs.lab.api import LabApi
    from podway.programs.lab.compare import Comparison
    from podway.programs.lab.compare import plot as draw
    from podway.programs.lab.report import compare_table

    as_json = as_json or check_output("-o", output) == "json"
    _need_root("compare")
    state, plan, _ = _running(name, state_dir)
    if requests < 1:
        raise ConfigError(f"--requests must be at least 1, not {requests}")
    ns, _, svc = service.rpartition("/")
    console = Console(stderr=True, log_path=False)
    pool = single_thread(netns=plan.client, name="lab-compare")
    try:
        report = Comparison(api=LabApi.of(state), plan=plan, client=pool,
                            namespace=ns or "default", name=svc, say=console.log).run(requests)
    finally:
        pool.shutdown()
    if plot is not None:
        draw(report, str(plot))
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        stdout_console().print(compare_table(report))
