"""RBAC as the API server's authorizer evaluates it, for ServiceAccount tokens (pure).

A request made with a token the emulator issued (``serviceaccounts/{name}/token``, what
``kubectl create token`` calls) is the user ``system:serviceaccount:{ns}:{name}`` in the groups
``system:serviceaccounts``, ``system:serviceaccounts:{ns}`` and ``system:authenticated``. It is
allowed when a ClusterRoleBinding (anywhere) or a RoleBinding (in the request's namespace)
names it — as a ServiceAccount, its user name or one of its groups — and the bound Role or
ClusterRole has a rule matching the verb, API group, resource (``pods``, ``pods/status``, ``*``)
and, when the rule lists them, the object's name. Otherwise the answer is the cluster's 403:
``pods is forbidden: User "system:serviceaccount:shop:app" cannot list resource "pods" in API
group "" in the namespace "shop"``. Discovery, ``/openapi``, ``/version`` and
SelfSubjectAccessReviews are open to every authenticated user (the default
``system:discovery``/``system:basic-user`` bindings). A request without credentials, or with
the administrator's token, is the lab's administrator and is not checked — unless it
impersonates someone (``kubectl --as``: ``impersonated``), who is then checked like any user.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
RBAC = "rbac.authorization.k8s.io"


@dataclass(frozen=True, slots=True)
class User:
    name: str
    groups: tuple[str, ...]

    @staticmethod
    def service_account(namespace: str, name: str) -> User:
        return User(f"system:serviceaccount:{namespace}:{name}",
                    ("system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                     "system:authenticated"))


def impersonated(name: str, groups: tuple[str, ...]) -> User | None:
    """Who an administrator acts as with ``Impersonate-User`` (and ``-Group``), as the API
    server sees it: ``system:serviceaccount:NS:NAME`` is that ServiceAccount with its groups;
    any other name is that user in the given groups and ``system:authenticated``. None
    without the header (the administrator itself)."""
    if not name:
        return None
    parts = name.split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"] and all(parts[2:]):
        account = User.service_account(parts[2], parts[3])
        return User(account.name, tuple(dict.fromkeys((*account.groups, *groups))))
    return User(name, tuple(dict.fromkeys((*groups, "system:authenticated"))))


@dataclass(frozen=True, slots=True)
class Attributes:
    verb: str  # get list watch create update patch delete
    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""  # "" for cluster-scoped requests or across all namespaces
    name: str = ""


def _names_subject(subject: Obj, user: User, binding_ns: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_ns
        return user.name == f"system:serviceaccount:{ns}:{name}"
    if kind == "User":
        return user.name == name
    if kind == "Group":
        return name in user.groups
    return False


def rule_allows(rule: Obj, attrs: Attributes) -> bool:
    verbs = rule.get("verbs") or []
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and attrs.group not in groups:
        return False
    wanted = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    resources = rule.get("resources") or []
    if not ("*" in resources or wanted in resources
            or (attrs.subresource and f"*/{attrs.subresource}" in resources)):
        return False
    names = rule.get("resourceNames") or []
    return not names or (bool(attrs.name) and attrs.name in names)


def _rules(role_ref: Obj, namespace: str, roles: dict[tuple[str, str], Obj],
           cluster_roles: dict[str, Obj]) -> list[Obj]:
    if role_ref.get("kind") == "ClusterRole":
        role = cluster_roles.get(str(role_ref.get("name")))
    elif role_ref.get("kind") == "Role":
        role = roles.get((namespace, str(role_ref.get("name"))))
    else:
        role = None
    return list((role or {}).get("rules") or [])


def allowed(user: User, attrs: Attributes, *, roles: Iterable[Obj],
            cluster_roles: Iterable[Obj], bindings: Iterable[Obj],
            cluster_bindings: Iterable[Obj]) -> bool:
    by_ns = {(str(r["metadata"].get("namespace", "")), str(r["metadata"]["name"])): r
             for r in roles}
    by_name = {str(r["metadata"]["name"]): r for r in cluster_roles}
    for binding in cluster_bindings:
        if any(_names_subject(s, user, "") for s in binding.get("subjects") or []) and \
                any(rule_allows(rule, attrs) for rule in _rules(
                    binding.get("roleRef") or {}, "", by_ns, by_name)):
            return True
    if not attrs.namespace:
        return False
    for binding in bindings:
        ns = str(binding["metadata"].get("namespace", ""))
        if ns != attrs.namespace:
            continue
        if any(_names_subject(s, user, ns) for s in binding.get("subjects") or []) and \
                any(rule_allows(rule, attrs) for rule in _rules(
                    binding.get("roleRef") or {}, ns, by_ns, by_name)):
            return True
    return False


def forbidden_message(user: User, attrs: Attributes) -> str:
    """The API server's wording of a denial."""
    what = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    subject = f'{attrs.resource} "{attrs.name}"' if attrs.name else attrs.resource
    where = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    return (f'{subject} is forbidden: User "{user.name}" cannot {attrs.verb} resource "{what}" '
            f'in API group "{attrs.group}" {where}')
