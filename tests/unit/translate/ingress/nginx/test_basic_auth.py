"""ingress-nginx basic authentication (auth-type basic, auth-secret, auth-secret-type,
auth-realm) is served as the IR's BasicAuth on every route of the Ingress; anything that keeps
it from being served as asked refuses the Ingress (403 with an error), never serves it open."""

from __future__ import annotations

import base64
import hashlib

import pytest

from podway.ir import BasicAuth, DirectResponse, Forward
from podway.translate import Result
from podway.translate.core.problems import Severity

from .test_fail_closed import answer, ingress, run


def sha(password: str) -> str:
    return "{SHA}" + base64.b64encode(hashlib.sha1(password.encode()).digest()).decode()


def secret(name: str, data: dict[str, str], namespace: str = "shop") -> str:
    encoded = ", ".join(f"{k}: {base64.b64encode(v.encode()).decode()}" for k, v in data.items())
    return f"""---
apiVersion: v1
kind: Secret
metadata: {{name: {name}, namespace: {namespace}}}
data: {{{encoded}}}
"""


HTPASSWD = (f"# users\nalice:{sha('wonderland')}\n\nbob:{{PLAIN}}builder\n"
            "carol:$apr1$abcdefgh$0123456789abcdefghijkl\nalice:{SHA}shadowed=\n")
BASIC = {"auth-type": "basic", "auth-secret": "htpasswd", "auth-realm": "Shop staff"}


def auth_of(result: Result) -> BasicAuth:
    route_action = answer(result)
    assert isinstance(route_action, Forward), route_action
    listener = next(lst for lst in result.ir.listeners if lst.name == "ingress/http")
    routes = [r for v in listener.virtual_hosts for r in v.routes]
    found = [f for r in routes for f in r.filters if isinstance(f, BasicAuth)]
    assert found, routes
    assert len(found) == len(routes), routes
    return found[0]


def test_an_htpasswd_file_is_served_with_the_hashes_the_engine_checks() -> None:
    """{SHA} users as written, {PLAIN} hashed; an apr1 user cannot log in and a warning names
    it; the first line of a name wins, as nginx reads the file."""
    result = run(ingress("web", BASIC) + secret("htpasswd", {"auth": HTPASSWD}))
    auth = auth_of(result)
    assert auth.users == (("alice", sha("wonderland")), ("bob", sha("builder")))
    assert auth.realm == "Shop staff"
    assert auth.source == "Secret shop/htpasswd"
    assert result.ir.pools
    assert [p.severity for p in result.problems] == [Severity.WARNING] * 2, result.problems
    realm, carol = sorted(result.problems, key=lambda p: p.field)
    assert "'carol'" in carol.message
    assert "htpasswd -s" in carol.message
    assert "not 'Shop staff'" in realm.message  # the engine cannot name it


def test_an_auth_map_secret_names_one_user_per_key() -> None:
    values = {"auth-type": "basic", "auth-secret-type": "auth-map", "auth-secret": "shop/users"}
    result = run(ingress("web", values) + secret("users", {"dave": sha("x"), "eve": sha("y")}))
    assert auth_of(result).users == (("dave", sha("x")), ("eve", sha("y")))
    assert not result.problems


@pytest.mark.parametrize(("values", "objects", "words"), [
    ({"auth-type": "basic"}, "", "needs auth-secret"),
    (BASIC, "", "not found"),
    ({**BASIC, "auth-secret": "other/htpasswd"}, secret("htpasswd", {"auth": HTPASSWD}, "other"),
     "another namespace"),
    (BASIC, secret("htpasswd", {"users": HTPASSWD}), "no key 'auth'"),
    (BASIC, secret("htpasswd", {"auth": "carol:$2y$05$abcdefghijklmnopqrstuv\n"}),
     "no user whose password hash"),
    ({**BASIC, "auth-secret-type": "file"}, secret("htpasswd", {"auth": HTPASSWD}),
     "neither auth-file nor auth-map"),
], ids=["no-secret-named", "missing", "other-namespace", "no-auth-key", "no-usable-hash",
        "bad-type"])
def test_basic_auth_that_cannot_be_served_refuses_every_request(
        values: dict[str, str], objects: str, words: str) -> None:
    result = run(ingress("web", values) + objects)
    assert answer(result) == DirectResponse(status=403)
    assert not result.ir.pools
    errors = [p for p in result.problems if p.severity is Severity.ERROR]
    assert len(errors) == 1, result.problems
    assert words in errors[0].message
    assert "refused (403)" in errors[0].message


def test_a_canary_with_its_own_basic_auth_is_refused() -> None:
    """A canary's requests run the main route and its filters: its own auth could not apply,
    so what it would take answers 403 rather than reach its backends unauthenticated."""
    canary = {"canary": "true", "canary-by-header": "x-next", **BASIC}
    result = run(ingress("web", {}), ingress("next", canary, day=2)
                 + secret("htpasswd", {"auth": HTPASSWD}))
    assert answer(result, {"x-next": "always"}) == DirectResponse(status=403)
    assert isinstance(answer(result), Forward)


def test_a_main_ingress_with_basic_auth_guards_its_canary_too() -> None:
    canary = {"canary": "true", "canary-by-header": "x-next"}
    result = run(ingress("web", BASIC) + secret("htpasswd", {"auth": HTPASSWD}),
                 ingress("next", canary, day=2))
    listener = next(lst for lst in result.ir.listeners if lst.name == "ingress/http")
    routes = [r for v in listener.virtual_hosts for r in v.routes]
    assert len(routes) > 1
    assert all(any(isinstance(f, BasicAuth) for f in r.filters) for r in routes)
