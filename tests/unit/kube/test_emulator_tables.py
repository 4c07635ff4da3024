"""The emulator's Table printers: ages as Kubernetes prints them, the JSONPath subset CRD
printer columns use."""

from __future__ import annotations

import pytest

from podway.kube.emulator.tables import human_duration, jsonpath


@pytest.mark.parametrize(("seconds", "shown"), [
    (-5, "<invalid>"), (0, "0s"), (119, "119s"), (125, "2m5s"), (600, "10m"), (179 * 60, "179m"),
    (3 * 3600 + 60, "3h1m"), (8 * 3600, "8h"), (47 * 3600, "47h"), (50 * 3600, "2d2h"),
    (9 * 86400, "9d"), (800 * 86400, "2y70d"), (9 * 365 * 86400, "9y")])
def test_human_duration(seconds: int, shown: str) -> None:
    assert human_duration(seconds) == shown


def test_jsonpath_subset() -> None:
    obj = {"spec": {"hosts": ["a", "b"], "rules": [{"port": 80}, {"port": 443}]},
           "status": {"conditions": [{"type": "Accepted", "status": "True"},
                                     {"type": "Programmed", "status": "False"}]}}
    assert jsonpath(obj, ".spec.hosts") == [["a", "b"]]
    assert jsonpath(obj, ".spec.hosts[1]") == ["b"]
    assert jsonpath(obj, ".spec.rules[*].port") == [80, 443]
    assert jsonpath(obj, '.status.conditions[?(@.type=="Programmed")].status') == ["False"]
    assert jsonpath(obj, "{.spec.missing}") == []


def pod_status_cell(pod: dict[str, object]) -> str:
    from podway.kube.emulator.resources import BUILTIN
    from podway.kube.emulator.tables import table

    pods = next(r for r in BUILTIN if r.group_resource == ("", "pods"))
    names = [c["name"] for c in table(pods, [])["columnDefinitions"]]
    return str(table(pods, [pod])["rows"][0]["cells"][names.index("Status")])


def init_pod(*states: dict[str, object], sidecar: bool = False) -> dict[str, object]:
    inits = [{"name": f"i{n}", **({"restartPolicy": "Always"} if sidecar and n == 0 else {})}
             for n in range(len(states))]
    return {"metadata": {"name": "p"}, "spec": {"initContainers": inits, "containers": [{}]},
            "status": {"phase": "Pending", "initContainerStatuses": [
                {"name": f"i{n}", "state": s, "started": "running" in s}
                for n, s in enumerate(states)],
                "containerStatuses": [{"state": {"waiting": {"reason": "PodInitializing"}}}]}}


DONE = {"terminated": {"exitCode": 0, "reason": "Completed"}}
WAIT = {"waiting": {"reason": "PodInitializing"}}


@pytest.mark.parametrize(("states", "shown"), [
    ((WAIT, WAIT), "Init:0/2"),
    ((DONE, {"running": {}}), "Init:1/2"),
    ((DONE, {"waiting": {"reason": "CrashLoopBackOff"}}), "Init:CrashLoopBackOff"),
    ((DONE, {"terminated": {"exitCode": 1, "reason": "Error"}}), "Init:Error"),
    ((DONE, {"terminated": {"exitCode": 2}}), "Init:ExitCode:2")])
def test_pod_status_while_initializing_is_kubectl_s(states: tuple[dict[str, object], ...],
                                                    shown: str) -> None:
    assert pod_status_cell(init_pod(*states)) == shown


def test_pod_status_after_its_init_containers_is_its_containers() -> None:
    pod = init_pod(DONE, DONE)
    pod["status"] = {**pod["status"], "phase": "Running",  # type: ignore[dict-item]
                     "containerStatuses": [{"state": {"running": {}}}]}
    assert pod_status_cell(pod) == "Running"
    # A running native sidecar is not an init container still to finish.
    side = init_pod({"running": {}}, DONE, sidecar=True)
    side["status"] = {**side["status"], "phase": "Running",  # type: ignore[dict-item]
                      "containerStatuses": [{"state": {"running": {}}}]}
    assert pod_status_cell(side) == "Running"
