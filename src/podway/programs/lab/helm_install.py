"""Run by the Python >= 3.12 interpreter that has helm-sdkpy (Helm's own Go library; the lab
finds it through PODWAY_HELM_PYTHON): ``helm install`` or ``helm upgrade`` of the chart in the
lab's API — CRDs, then every object in Helm's kind order (an upgrade patches what changed,
deletes what the new manifest lacks). The release is kept as Helm keeps it by default, a Secret
of the release namespace (``HELM_DRIVER=secret``), so a later process upgrades it.
Standalone (standard library and helm_sdkpy only: Podway is not installed there)::

    HELM_DRIVER=secret python helm_install.py install|upgrade CHART KUBECONFIG NAMESPACE VALUES

Prints the release's manifest on stdout; a failure is one line on stderr and exit status 1.
"""

import asyncio
import importlib
import json
import os
import sys


async def main() -> None:
    # Not a dependency of Podway: it lives only in the helper interpreter that runs this.
    helm_sdkpy = importlib.import_module("helm_sdkpy")

    action, chart, kubeconfig, namespace, values = sys.argv[1:6]
    config = helm_sdkpy.Configuration(namespace=namespace, kubeconfig=kubeconfig)
    if action == "install":
        release = await helm_sdkpy.Install(config).run(
            "podway", chart, values=json.loads(values), wait=False, timeout=120)
    else:
        # The values given replace the release's (as `helm upgrade -f values.json`); no wait:
        # the caller follows the rollout itself.
        release = await helm_sdkpy.Upgrade(config).run(
            "podway", chart, values=json.loads(values), wait=False, timeout=120)
    print(release["manifest"])


if __name__ == "__main__":
    if os.environ.get("HELM_DRIVER") != "secret" or sys.argv[1:2] not in (["install"],
                                                                          ["upgrade"]):
        sys.exit("usage: HELM_DRIVER=secret helm_install.py install|upgrade CHART KUBECONFIG "
                 "NAMESPACE VALUES_JSON")
    try:
        asyncio.run(main())
    except Exception as exc:  # one line for the lab's error message
        sys.exit(f"helm {sys.argv[1]} failed: {type(exc).__name__}: {exc}")
