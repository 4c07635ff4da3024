"""A small synchronous client of the lab's API for the CLI (``apply``, ``get``, ``status``).

Kinds are resolved through discovery like kubectl does (kind, plural, singular or short name,
optionally ``plural.group``), so anything the control plane serves — CRDs included — works.
Errors are ``LabError`` lines with the API's own message.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from podway.programs.lab.network import LabError
from podway.programs.lab.state import LabState

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short: tuple[str, ...]

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else "/api/v1"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


class LabApi:
    def __init__(self, port: int, *, ca: bytes | None = None, token: str = "") -> None:
        """The API on ``127.0.0.1:port``: HTTPS trusting ``ca`` with ``token`` (the lab's),
        plain HTTP without a CA (a bare emulator)."""
        self.base = f"{'https' if ca else 'http'}://127.0.0.1:{port}"
        self._context = ssl.create_default_context(cadata=ca.decode()) if ca else None
        self._token = token
        self._kinds: list[Kind] | None = None

    @classmethod
    def of(cls, state: LabState) -> LabApi:
        """The API of the lab whose state folder this is, as its administrator."""
        pki = state.pki
        return cls(state.load()[1], ca=pki.ca_cert.read_bytes(), token=pki.admin_token)

    def call(self, method: str, path: str, body: Obj | None = None,
             content_type: str = "application/json") -> tuple[int, Obj]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10, context=self._context) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                payload = json.loads(exc.read() or b"{}")
            except ValueError:
                payload = {}
            return exc.code, payload
        except OSError as exc:
            raise LabError(f"the lab's API at {self.base} does not answer ({exc}): is the lab "
                           "up? (podway lab status)") from None

    def kinds(self) -> list[Kind]:
        if self._kinds is None:
            found = []
            lists = ["/api/v1"]
            _, groups = self.call("GET", "/apis")
            for group in groups.get("groups") or []:
                lists.extend(f"/apis/{v['groupVersion']}" for v in group.get("versions") or [])
            for path in lists:
                _, res = self.call("GET", path)
                gv = str(res.get("groupVersion", "v1"))
                group, _, version = gv.rpartition("/")
                for r in res.get("resources") or []:
                    if "/" in r["name"]:
                        continue
                    found.append(Kind(group, version, r["name"], r["kind"], r["namespaced"],
                                      tuple(r.get("shortNames") or ())))
            self._kinds = found
        return self._kinds

    def kind(self, word: str, api_version: str | None = None) -> Kind:
        name, _, group = word.partition(".")
        for k in self.kinds():
            if api_version is not None:
                if k.kind == word and k.api_version == api_version:
                    return k
                continue
            if (group and k.group != group) or \
                    name.lower() not in (k.plural, k.kind.lower(), *k.short):
                continue
            return k
        raise LabError(f"the lab's API does not serve {word!r}"
                       + (f" in {api_version}" if api_version else "")
                       + " (see `kubectl api-resources` with the lab's kubeconfig)")

    def list(self, kind: Kind, namespace: str | None = None) -> list[Obj]:
        code, body = self.call("GET", kind.path(namespace))
        if code != 200:
            raise LabError(f"list {kind.plural}: {body.get('message', code)}")
        return [{"apiVersion": kind.api_version, "kind": kind.kind, **o}
                for o in body.get("items") or []]

    def apply(self, obj: Obj) -> str:
        """Create ``obj`` or replace the spec of the existing one; what happened."""
        kind = self.kind(str(obj.get("kind")), str(obj.get("apiVersion")))
        meta = obj.setdefault("metadata", {})
        ns = str(meta.get("namespace") or "default") if kind.namespaced else None
        code, body = self.call("POST", kind.path(ns), obj)
        what = f"{kind.kind.lower()}/{meta.get('name')}"
        if code == 201:
            return f"{what} created"
        if code != 409:
            raise LabError(f"{what}: {body.get('message', code)}")
        _, current = self.call("GET", kind.path(ns, str(meta["name"])))
        merged = {**current, **{k: v for k, v in obj.items() if k not in ("metadata", "status")}}
        merged["metadata"] = {**current["metadata"],
                              "labels": meta.get("labels", current["metadata"].get("labels")),
                              "annotations": {**(current["metadata"].get("annotations") or {}),
                                              **(meta.get("annotations") or {})}}
        if merged == current:
            return f"{what} unchanged"
        code, body = self.call("PUT", kind.path(ns, str(meta["name"])), merged)
        if code != 200:
            raise LabError(f"{what}: {body.get('message', code)}")
        return f"{what} configured"
