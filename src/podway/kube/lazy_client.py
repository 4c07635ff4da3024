"""Load kubernetes-asyncio's generated client lazily: an API class or model is imported when
first used, not all ~850 modules at the first ``from kubernetes_asyncio import client``.

kubernetes-asyncio's ``client/__init__.py`` imports every API class and every model, and its
``ApiClient`` imports the whole ``models`` package; Podway uses a handful of API classes and
reads most answers raw (``_preload_content=False``). Importing it all costs about 17 MiB of
resident memory in every process that talks to the API (controller, agent), a tenth of the
controller's budget at 1,000 routes (``bench/convergence.py --rss``).

``install()`` puts two module objects in ``sys.modules`` before the package is first imported:
``kubernetes_asyncio.client`` and ``kubernetes_asyncio.client.models``, each a package (same
``__path__``, so submodules import as usual) whose names resolve on first access, from the
``from ... import Name`` lines of the real ``__init__.py`` (read as text, never executed, and
only once a name is first asked for: ``import podway`` reads no file). Names
are the same objects the eager import gives, so ``isinstance``, the deserializer's
``getattr(models, "V1Pod")`` and ``from kubernetes_asyncio.client import CoreV1Api`` behave as
before.

The package's own ``__init__`` also imports four sub-packages Podway never uses (``dynamic``,
``stream``, ``utils``, ``watch``), and with them ``pydoc`` and, where it is installed,
``kubernetes-validate`` with ``jsonschema`` (~3 MiB in the controller, ~50 modules); and the
``client.api`` package's ``__init__`` imports every one of the ~65 API classes' modules when
the first one is imported (~10 MiB; Podway uses five). Each of these is put in
``sys.modules`` as a ``DeferredPackage``: its submodules import as usual, and its real
``__init__`` runs, in that very module object, at the first name asked of it.

Invariants: ``install`` changes nothing when the client was already imported (eagerly: then
that import stands) or when kubernetes-asyncio is not installed; it is idempotent.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

_PACKAGE = "kubernetes_asyncio.client"
#: Packages whose ``__init__`` imports what Podway never uses: deferred (dotted, under
#: ``kubernetes_asyncio``).
UNUSED = ("dynamic", "stream", "utils", "watch", "client.api")
_IMPORT = re.compile(r"^from (kubernetes_asyncio\.client[\w.]*) import (\w+)\s*$", re.M)


class LazyPackage(types.ModuleType):
    """A package whose public names are imported from their own module on first access; which
    module defines which name is read from ``init`` (the real ``__init__.py``) on first need,
    so ``install`` costs no file read at start-up."""

    def __init__(self, name: str, folder: Path, init: Path | None = None) -> None:
        super().__init__(name)
        self.__path__ = [str(folder)]
        self.__file__ = str(folder / "__init__.py")
        self.__package__ = name
        self._lazy_init = init

    @functools.cached_property
    def _lazy_names(self) -> dict[str, str]:
        """Public name → the module that defines it."""
        return names_of(self._lazy_init) if self._lazy_init is not None else {}

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith(("__", "_lazy")):
            raise AttributeError(attr)
        where = self._lazy_names.get(attr)
        try:
            module = importlib.import_module(where or f"{self.__name__}.{attr}")
        except ImportError:
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}") from None
        value = module if where is None else getattr(module, attr)
        setattr(self, attr, value)  # later lookups skip __getattr__
        return value

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._lazy_names))


class DeferredPackage(types.ModuleType):
    """A package whose real ``__init__`` runs at the first public name (or ``__all__``) asked
    of it, in this module object; until then only its submodules can be imported."""

    def __init__(self, spec: importlib.machinery.ModuleSpec) -> None:
        super().__init__(spec.name)
        self.__spec__ = spec
        self.__path__ = list(spec.submodule_search_locations or ())
        self.__file__ = spec.origin
        self.__package__ = spec.name
        self.__loader__ = spec.loader

    def __getattr__(self, attr: str) -> Any:
        if (attr.startswith("__") and attr != "__all__") or "_deferred_ran" in self.__dict__:
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")
        self.__dict__["_deferred_ran"] = True
        spec = self.__spec__
        assert spec is not None  # set by __init__
        assert spec.loader is not None  # checked by install
        spec.loader.exec_module(self)  # the real __init__, as the import would have run it
        try:
            return self.__dict__[attr]
        except KeyError:
            raise AttributeError(
                f"module {self.__name__!r} has no attribute {attr!r}") from None


def names_of(init: Path) -> dict[str, str]:
    """The ``from kubernetes_asyncio.client... import Name`` lines of a package ``__init__``."""
    return {name: module for module, name in _IMPORT.findall(init.read_text())}


def install() -> bool:
    """Make the generated client lazy (see the module docstring); True when it now is."""
    if isinstance(sys.modules.get(_PACKAGE), LazyPackage):
        return True
    if _PACKAGE in sys.modules:
        return False  # imported eagerly already
    spec = importlib.util.find_spec("kubernetes_asyncio")
    if spec is None or spec.origin is None:
        return False
    folder = Path(spec.origin).parent / "client"
    inits = (folder / "__init__.py", folder / "models" / "__init__.py")
    if not all(init.is_file() for init in inits):
        return False  # a layout this module does not know: leave the import as it is
    models = LazyPackage(f"{_PACKAGE}.models", folder / "models", inits[1])
    client = LazyPackage(_PACKAGE, folder, inits[0])
    setattr(client, "models", models)  # noqa: B010 (a module attribute, set as import would)
    sys.modules[f"{_PACKAGE}.models"] = models
    sys.modules[_PACKAGE] = client
    for name in UNUSED:
        within = folder.parent.joinpath(*name.split(".")[:-1])  # the folder holding it
        sub = importlib.machinery.PathFinder.find_spec(f"kubernetes_asyncio.{name}",
                                                       [str(within)])
        if sub is not None and sub.loader is not None and sub.submodule_search_locations:
            sys.modules[sub.name] = DeferredPackage(sub)
    return True
