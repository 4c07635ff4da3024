"""Backend modes from API objects: members per mode, the NPL opt-in, pending → served."""

from __future__ import annotations

from podway.model import npl
from podway.translate import BackendMode
from tests.waiting import eventually

from .bed import Bed, endpoint_slice, lb_service, members, node, options, pod

POOL = "pool/default/web/80/tcp"


def seed(bed: Bed, *, annotations: dict[str, str] | None = None, with_npl: bool = True) -> None:
    bed.emu.put("nodes", node("n1", "198.18.0.11"))
    bed.emu.put("services", lb_service("web", 80, annotations=annotations, node_port=30080))
    bed.emu.put("endpointslices", endpoint_slice("web", {"web-a": "198.18.5.1"}),
                group="discovery.k8s.io")
    bed.emu.put("pods", pod("web-a", "198.18.5.1",
                            npl=[(8080, "198.18.0.11", 61000)] if with_npl else None))


async def test_each_mode_takes_its_members_from_the_api(bed: Bed) -> None:
    """clusterip: pod IP; nodeport: node IP + nodePort; nodeportlocal: the pod's NPL entry —
    each by the Service annotation over the default, switched by editing it."""
    seed(bed)
    await bed.start()
    await bed.until(lambda s: members(s, POOL) == ["198.18.5.1:8080"])
    for mode, want in (("nodeport", "198.18.0.11:30080"),
                       ("nodeportlocal", "198.18.0.11:61000"),
                       ("clusterip", "198.18.5.1:8080")):
        service = lb_service("web", 80, annotations={"podway.io/backend-mode": mode},
                             node_port=30080)
        bed.emu.put("services", service)
        await bed.until(lambda s, want=want: members(s, POOL) == [want])


async def test_npl_opt_in_is_added_and_removed_only_where_podway_added_it(bed: Bed) -> None:
    """In nodeportlocal mode the controller marks the Service; switching away removes only its
    own annotation; a user's own opt-in is never removed."""
    seed(bed)
    bed.emu.put("services", lb_service("mine", 81, annotations={
        npl.ENABLED_ANNOTATION: "true", "podway.io/backend-mode": "clusterip"}))
    bed.translate = options(BackendMode.NODEPORTLOCAL)
    await bed.start()

    def annotations(name: str) -> dict[str, str]:
        obj = bed.emu.get("services", "default", name)
        assert obj is not None
        return dict(obj["metadata"].get("annotations") or {})

    await eventually(lambda: annotations("web").get(npl.ENABLED_ANNOTATION) == "true")
    assert annotations("web").get("podway.io/npl-managed") == "true"
    # Adding the opt-in was the controller's own next step: nobody was warned it was missing.
    assert not [e for e in bed.emu.events if e.get("reason") == "NodePortLocalNotEnabled"]
    bed.emu.put("services", lb_service("web", 80, annotations={
        **annotations("web"), "podway.io/backend-mode": "clusterip"}))
    await eventually(lambda: npl.ENABLED_ANNOTATION not in annotations("web"))
    assert "podway.io/npl-managed" not in annotations("web")
    assert annotations("mine").get(npl.ENABLED_ANNOTATION) == "true"


async def test_pod_without_npl_annotation_is_pending_then_served(bed: Bed) -> None:
    """A pod whose NPL annotation is late past the grace is reported pending (a Warning event
    on the Service), then served once the annotation appears, and a Normal says it is over."""
    seed(bed, with_npl=False)
    bed.translate = options(BackendMode.NODEPORTLOCAL)
    await bed.start(pending_warning_s=0.3)
    state = await bed.until(lambda s: POOL in s.ir.pools)
    assert members(state, POOL) == []
    await eventually(lambda: any(e.get("reason") == "PendingMembers" for e in bed.emu.events))
    bed.emu.put("pods", pod("web-a", "198.18.5.1", npl=[(8080, "198.18.0.11", 61000)]))
    await bed.until(lambda s: members(s, POOL) == ["198.18.0.11:61000"])
    await eventually(lambda: any(e.get("reason") == "MembersReady" for e in bed.emu.events))
    controller = bed.controller
    assert controller is not None
    assert controller.gate is not None
    assert dict(controller.gate.report.pending) == {}


async def test_refused_npl_opt_in_is_retried_with_the_next_state(bed: Bed) -> None:
    """The API refuses the opt-in PATCH once; the next state (an endpoint change) retries it."""
    seed(bed)
    bed.translate = options(BackendMode.NODEPORTLOCAL)
    bed.emu.fail(500, method="PATCH", plural="services", times=1)
    await bed.start()
    await eventually(lambda: bed.emu.count("patch", "services", "default", "web") == 1)
    bed.emu.put("endpointslices", endpoint_slice("web", {"web-a": "198.18.5.1",
                                                         "web-b": "198.18.5.2"}),
                group="discovery.k8s.io")

    def enabled() -> bool:
        obj = bed.emu.get("services", "default", "web") or {}
        return (obj["metadata"].get("annotations") or {}).get(npl.ENABLED_ANNOTATION) == "true"

    await eventually(enabled)
