"""Run by a Python >= 3.12 interpreter that has helm-sdkpy (Helm's own Go library): lint the
chart, then install it with the in-memory release driver into the API at KUBECONFIG (the
test's emulator), and print {"lint": ..., "manifest": ...} as JSON.

    python helm_render.py CHART KUBECONFIG NAMESPACE VALUES_JSON
"""

import asyncio
import json
import os
import sys


async def main() -> None:
    # The caller sets HELM_DRIVER=memory (no release Secret: the emulator speaks JSON only);
    # Go reads the environment the process started with, so it cannot be set from here.
    assert os.environ.get("HELM_DRIVER") == "memory"
    import helm_sdkpy  # type: ignore[import-not-found]

    chart, kubeconfig, namespace, values = sys.argv[1:5]
    config = helm_sdkpy.Configuration(namespace=namespace, kubeconfig=kubeconfig)
    lint = await helm_sdkpy.Lint(config).run(chart)
    release = await helm_sdkpy.Install(config).run(
        "podway", chart, values=json.loads(values), wait=False, timeout=60)
    print(json.dumps({"lint": lint, "manifest": release["manifest"]}))


asyncio.run(main())
