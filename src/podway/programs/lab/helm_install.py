"""Run by the Python >= 3.12 interpreter that has helm-sdkpy (Helm's own Go library; the lab
finds it through PODWAY_HELM_PYTHON): install the chart into the lab's API as ``helm install``
does — CRDs, then every object in Helm's kind order — with Helm's in-memory release driver.
Standalone (standard library and helm_sdkpy only: Podway is not installed there)::

    HELM_DRIVER=memory python helm_install.py CHART KUBECONFIG NAMESPACE VALUES_JSON

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

    chart, kubeconfig, namespace, values = sys.argv[1:5]
    config = helm_sdkpy.Configuration(namespace=namespace, kubeconfig=kubeconfig)
    release = await helm_sdkpy.Install(config).run(
        "podway", chart, values=json.loads(values), wait=False, timeout=120)
    print(release["manifest"])


if __name__ == "__main__":
    if os.environ.get("HELM_DRIVER") != "memory":
        sys.exit("helm_install: set HELM_DRIVER=memory (the lab keeps no release Secret)")
    try:
        asyncio.run(main())
    except Exception as exc:  # one line for the lab's error message
        sys.exit(f"helm install failed: {type(exc).__name__}: {exc}")
