"""kubernetes-asyncio's generated client loads on demand (podway.kube.lazy_client)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from podway.kube.lazy_client import LazyPackage, names_of


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_podway_makes_the_client_lazy_and_it_still_works() -> None:
    """After ``import podway``, the client imports a handful of modules, not every model; API
    classes, models, the deserializer and the exceptions are the real ones."""
    out = run("""
        import asyncio, sys
        import podway
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client import CoreV1Api, V1ObjectMeta
        from kubernetes_asyncio.client.exceptions import ApiException
        from kubernetes_asyncio.client.models.v1_pod import V1Pod

        async def main():
            api = client.ApiClient(client.Configuration(host="http://127.0.0.1:1"))
            assert isinstance(CoreV1Api(api), client.CoreV1Api)
            pod = api._ApiClient__deserialize(
                {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}, "V1Pod")
            assert type(pod) is V1Pod and pod.spec.containers[0].name == "c"
            assert isinstance(pod.metadata, V1ObjectMeta)
            assert client.ApiException is ApiException
            assert client.models.V1Pod is V1Pod
            await api.close()
        asyncio.run(main())
        print(len([m for m in sys.modules if m.startswith("kubernetes_asyncio.client.models.")]))
    """)
    assert int(out) < 50  # eager: every one of the ~700 models


def test_an_eager_import_first_is_left_alone() -> None:
    """Imported before Podway (a tool of the user's): that import stands, nothing is swapped."""
    out = run("""
        from kubernetes_asyncio import client
        import podway
        from podway.kube.lazy_client import LazyPackage, install
        assert not isinstance(client, LazyPackage)
        print(install())
    """)
    assert out == "False"


def test_names_come_from_the_real_init_lines(tmp_path: Path) -> None:
    init = tmp_path / "__init__.py"
    init.write_text("from kubernetes_asyncio.client.api.core_v1_api import CoreV1Api\n"
                    "# from kubernetes_asyncio.client.api.nope import Nope\n"
                    "from kubernetes_asyncio.client.models.v1_pod import V1Pod\n")
    assert names_of(init) == {"CoreV1Api": "kubernetes_asyncio.client.api.core_v1_api",
                              "V1Pod": "kubernetes_asyncio.client.models.v1_pod"}
    lazy = LazyPackage("x", tmp_path)
    with pytest.raises(AttributeError, match="nothing_here"):
        lazy.nothing_here  # noqa: B018


def test_the_sub_packages_podway_never_uses_load_only_when_asked() -> None:
    """``kubernetes_asyncio``'s ``__init__`` imports dynamic, stream, utils and watch (and with
    them pydoc, kubernetes-validate and jsonschema): after ``import podway`` none of their
    modules loads until a name is asked of them; then each is the real package."""
    out = run("""
        import sys
        import podway
        import kubernetes_asyncio
        from kubernetes_asyncio import client
        assert client.ApiClient is not None
        loaded = sorted(m for m in sys.modules if m.startswith(
            ("pydoc", "kubernetes_validate", "jsonschema", "kubernetes_asyncio.dynamic.",
             "kubernetes_asyncio.watch.", "kubernetes_asyncio.stream.",
             "kubernetes_asyncio.utils.")))
        assert loaded == [], loaded
        from kubernetes_asyncio.watch import Watch
        from kubernetes_asyncio.watch.watch import Watch as Same
        from kubernetes_asyncio import dynamic
        from kubernetes_asyncio.dynamic.client import DynamicClient
        from kubernetes_asyncio.utils import create_from_yaml
        from kubernetes_asyncio.stream import WsApiClient
        star = {}
        exec("from kubernetes_asyncio.dynamic import *", star)
        assert Watch is Same and dynamic.DynamicClient is DynamicClient
        assert star["DynamicClient"] is DynamicClient
        assert callable(create_from_yaml) and WsApiClient.__name__ == "WsApiClient"
        print(kubernetes_asyncio.watch.Watch is Watch)
    """)
    assert out == "True"


def test_a_deferred_package_says_which_name_it_lacks() -> None:
    out = run("""
        import podway
        from kubernetes_asyncio import watch
        try:
            watch.no_such_name
        except AttributeError as exc:
            print(exc)
    """)
    assert out == "module 'kubernetes_asyncio.watch' has no attribute 'no_such_name'"


def test_an_api_class_loads_its_own_module_not_every_api() -> None:
    """The ``client.api`` package's ``__init__`` imports all ~65 API modules; asked for a few
    API classes, only their modules load, and the package still gives any name on demand."""
    out = run("""
        import sys
        import podway
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client import CoreV1Api
        apis = (CoreV1Api, client.CustomObjectsApi, client.CoordinationV1Api)
        loaded = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.api.")]
        assert sorted(loaded) == ["kubernetes_asyncio.client.api.coordination_v1_api",
                                  "kubernetes_asyncio.client.api.core_v1_api",
                                  "kubernetes_asyncio.client.api.custom_objects_api"], loaded
        from kubernetes_asyncio.client.api import CoreV1Api as Same, StorageV1Api
        assert Same is CoreV1Api and client.StorageV1Api is StorageV1Api
        print(len([m for m in sys.modules if m.startswith("kubernetes_asyncio.client.api.")]))
    """)
    assert int(out) > 50  # asked for a name of the package itself: its real __init__ ran
