"""The emulator's discovery documents: API groups, versions and the resources of each."""

from __future__ import annotations

from podway.kube.emulator.server_types import SCALABLE
from podway.kube.emulator.store import ApiError, Obj, Store


class DiscoveryMixin:
    """A part of ``podway.kube.emulator.server.Api`` (its other methods: the stubs below)."""

    store: Store

    def _versions(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for rtype in self.store.types():
            if rtype.group and rtype.version not in groups.setdefault(rtype.group, []):
                groups[rtype.group].append(rtype.version)
        return groups

    def _group(self, name: str) -> Obj:
        versions = self._versions().get(name)
        if not versions:
            raise ApiError(404, "NotFound", f"the server could not find the group {name}")
        entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": entries,
                "preferredVersion": entries[0]}

    def _group_list(self) -> Obj:
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [self._group(name) for name in sorted(self._versions())]}

    def _resource_list(self, group: str, version: str) -> Obj:
        served = [t for t in self.store.types() if t.group == group and t.version == version]
        if not served:
            raise ApiError(404, "NotFound", f"the server could not find {group}/{version}")
        verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
        resources: list[Obj] = []
        for rtype in sorted(served, key=lambda t: t.plural):
            resources.append({"name": rtype.plural, "singularName": rtype.singular,
                              "namespaced": rtype.namespaced, "kind": rtype.kind,
                              "verbs": verbs, "shortNames": list(rtype.short_names),
                              "categories": list(rtype.categories)})
            if rtype.status:
                resources.append({"name": f"{rtype.plural}/status", "singularName": "",
                                  "namespaced": rtype.namespaced, "kind": rtype.kind,
                                  "verbs": ["get", "patch", "update"]})
            if rtype.group_resource in SCALABLE:
                resources.append({"name": f"{rtype.plural}/scale", "singularName": "",
                                  "namespaced": rtype.namespaced, "kind": "Scale",
                                  "group": "autoscaling", "version": "v1",
                                  "verbs": ["get", "patch", "update"]})
        gv = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                "resources": resources}
