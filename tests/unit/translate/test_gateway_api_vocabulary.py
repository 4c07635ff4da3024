"""Every condition type and reason Podway writes on a Gateway API object is the API's own:
one of the constants of ``apis/v1`` in Gateway API v1.6.1 (the release Podway targets, see
``GATEWAY_API_VERSION``), or a reason that release's godoc lists for the condition
(issue 27: "the exact condition types and reasons of the apis/v1 constants"). Checked on the
status of every golden case and on engine refusals of Gateway and ListenerSet listeners; and
every condition carries ``observedGeneration``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from podway.envoy import types
from podway.model import Snapshot
from podway.model.kinds import CRDS
from podway.model.loader import load_text
from podway.pipeline import Rejection
from podway.status import build
from podway.translate import TranslateOptions, translate
from podway.translate.core.status import to_api
from podway.translate.gateway.status import GATEWAY_API_VERSION

GOLDEN = Path(__file__).parents[2] / "golden/translate"
GATEWAY_API_KINDS = frozenset(k.name for k in CRDS if k.group == "gateway.networking.k8s.io")

#: The string values of the condition type and reason constants of ``apis/v1`` at v1.6.1
#: (``*ConditionType`` and ``*ConditionReason``/``*Reason`` constants of every ``*_types.go``).
API_V1 = frozenset({
    "Accepted", "AddressNotAssigned", "AddressNotUsable", "Attached", "BackendNotFound",
    "ConfigurationChanged", "Conflicted", "Detached", "HostnameConflict", "IncompatibleFilters",
    "InsecureFrontendValidationMode", "Invalid", "InvalidCACertificateKind",
    "InvalidCACertificateRef", "InvalidCertificateRef", "InvalidClientCertificateRef",
    "InvalidKind", "InvalidParameters", "InvalidRouteKinds", "ListenerConflict",
    "ListenersNotReady", "ListenersNotResolved", "ListenersNotValid", "NoConflicts",
    "NoMatchingListenerHostname", "NoMatchingParent", "NoResources", "NoValidCACertificate",
    "NotAllowed", "NotAllowedByListeners", "NotReconciled", "OverlappingCertificates",
    "OverlappingHostnames", "OverlappingTLSConfig", "ParentNotAccepted", "PartiallyInvalid",
    "Pending", "PortUnavailable", "Programmed", "ProtocolConflict", "Ready", "RefNotPermitted",
    "ResolvedRefs", "Scheduled", "SupportedVersion", "TargetNotFound", "TooManyListeners",
    "Unsupported", "UnsupportedAddress", "UnsupportedProtocol", "UnsupportedValue",
    "UnsupportedVersion", "Waiting",
})
#: Reasons the v1.6.1 godoc lists for a condition without a constant of their own.
GODOC_ONLY = frozenset({"ParentNotProgrammed"})  # ListenerSet Programmed


def words(status: dict[str, Any], where: str) -> Iterator[tuple[str, str]]:
    """(where, word) for each condition type and reason in an API status."""
    for c in status.get("conditions") or ():
        yield f"{where} condition", c["type"]
        yield f"{where} {c['type']} reason", c["reason"]
        if not isinstance(c.get("observedGeneration"), int):  # on every condition (issue 27)
            yield f"{where} {c['type']} without", "observedGeneration"
    for listener in status.get("listeners") or ():
        yield from words(listener, f"{where} listener")
    for parent in status.get("parents") or ():
        yield from words(parent, f"{where} parent")


def foreign(objects: dict[str, Any]) -> list[str]:
    out = []
    for ref, entry in objects.items():
        kind = ref.split("/")[0]
        if kind not in GATEWAY_API_KINDS or not entry.get("status"):
            continue
        out += [f"{ref}: {where} {word}" for where, word in words(entry["status"], kind)
                if word not in API_V1 | GODOC_ONLY]
    return out


def test_the_pinned_release_is_the_targeted_one() -> None:
    assert GATEWAY_API_VERSION == "v1.6.1"  # else refresh API_V1 from that release


@pytest.mark.parametrize("case", sorted(p.name.removesuffix(".out.yaml")
                                        for p in GOLDEN.glob("*.out.yaml")))
def test_golden_statuses_speak_the_apis_words(case: str) -> None:
    data = yaml.safe_load((GOLDEN / f"{case}.out.yaml").read_text())
    objects = data.get("objects") or {}
    assert foreign(objects) == []


def test_refused_listeners_speak_the_apis_words() -> None:
    snapshot = Snapshot.of_objects(load_text(
        (GOLDEN / "gateway-listenersets.in.yaml").read_text()).objects)
    result = translate(snapshot, TranslateOptions(address="198.18.0.10"))
    rejections = [Rejection(node="edge-1", type_url=types.LISTENER, resource=ls.name,
                            version="1", message=message)
                  for ls in result.ir.listeners
                  for message in ("cannot bind: Address already in use",)]
    rejections.append(Rejection(node="edge-2", type_url=types.LISTENER,
                                resource=result.ir.listeners[0].name, version="1",
                                message="invalid filter chain"))
    doc = build(snapshot=snapshot, result=result, rejections=rejections)
    objects = {str(ref): {"status": to_api(status, kind=ref.kind)}
               for ref, status in doc.statuses.items()}
    assert foreign(objects) == []
