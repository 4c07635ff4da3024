"""GatewayClass ``SupportedVersion``: True when every Gateway API CRD in the cluster carries a
bundle version of the release Podway targets (any patch), False/UnsupportedVersion otherwise
(the class stays accepted: best effort); not written without an API to ask (files)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from podway.model import Snapshot
from podway.model.loader import load_text
from podway.translate import TranslateOptions, translate
from podway.translate.gateway.status import GATEWAY_API_VERSION
from tests.unit.translate.gateway_strategies import OUR_CLASS_YAML

GATEWAYS = "gateways.gateway.networking.k8s.io"
ROUTES = "httproutes.gateway.networking.k8s.io"
MINOR = GATEWAY_API_VERSION.rsplit(".", 1)[0]


def _conditions(bundles: dict[str, str] | None) -> dict[str, tuple[bool | None, str]]:
    snapshot = replace(Snapshot.of_objects(load_text(OUR_CLASS_YAML).objects),
                       gateway_api_bundles=bundles)
    result = translate(snapshot, TranslateOptions(address="198.18.0.1"))
    [status] = [s for ref, s in result.statuses.items() if ref.kind == "GatewayClass"]
    return {c.type: (c.status, c.reason) for c in status.conditions}


@pytest.mark.parametrize(("bundles", "expected"), [
    ({GATEWAYS: GATEWAY_API_VERSION, ROUTES: GATEWAY_API_VERSION}, (True, "SupportedVersion")),
    ({GATEWAYS: f"{MINOR}.0", ROUTES: f"{MINOR}.9"}, (True, "SupportedVersion")),
    ({GATEWAYS: GATEWAY_API_VERSION, ROUTES: "v1.2.1"}, (False, "UnsupportedVersion")),
    ({GATEWAYS: GATEWAY_API_VERSION, ROUTES: ""}, (False, "UnsupportedVersion")),
    ({GATEWAYS: "1.6.1"}, (False, "UnsupportedVersion")),
])
def test_supported_version_follows_the_crds_bundle_versions(
        bundles: dict[str, str], expected: tuple[bool, str]) -> None:
    conditions = _conditions(bundles)
    assert conditions["SupportedVersion"] == expected
    assert conditions["Accepted"] == (True, "Accepted")  # best effort either way


def test_no_api_no_supported_version_condition() -> None:
    assert "SupportedVersion" not in _conditions(None)


def test_the_incremental_translator_follows_a_bundle_change() -> None:
    """A source hands a bundle change on with the GatewayClass as changed (a new object): the
    incremental translator's status follows it."""
    from podway.translate import IncrementalTranslator

    snapshot = replace(Snapshot.of_objects(load_text(OUR_CLASS_YAML).objects),
                       gateway_api_bundles={GATEWAYS: GATEWAY_API_VERSION})
    inc = IncrementalTranslator(TranslateOptions(address="198.18.0.1"))
    inc.update(snapshot)
    [(key, cls)] = snapshot.objects["GatewayClass"].items()
    changed = replace(snapshot.replace("GatewayClass", {key: cls.model_copy()}),
                      gateway_api_bundles={GATEWAYS: "v1.2.0"})
    result = inc.update(changed, [("GatewayClass", key)])
    [status] = [s for ref, s in result.statuses.items() if ref.kind == "GatewayClass"]
    assert {c.type: c.status for c in status.conditions}["SupportedVersion"] is False
