"""The HAProxy renderer: path semantics, slots, what changes need a reload, what is reported."""

from __future__ import annotations

import dataclasses
import re
from types import MappingProxyType

from podway.haproxy import slots
from podway.haproxy.backends import backend_name, status_regex
from podway.haproxy.http import path_regex, tree_safe
from podway.haproxy.names import vhost_key, word
from podway.haproxy.render import Rendered, RenderOptions, render
from podway.ir import (
    IR,
    Forward,
    HeaderMatch,
    HealthCheck,
    HealthCheckKind,
    Listener,
    ListenerProtocol,
    Member,
    MemberState,
    Mirror,
    ObjectRef,
    PathKind,
    PathMatch,
    Pool,
    RateLimit,
    Route,
    RouteMatch,
    VirtualHost,
    WeightedPool,
)

ORIGIN = ObjectRef(kind="Ingress", namespace="default", name="web")
OPTS = RenderOptions(folder="/s", runtime_socket="/s/runtime.sock")


def _route(name: str, path: str = "/", *, kind: PathKind = PathKind.PREFIX,
           headers: tuple[HeaderMatch, ...] = (), filters: tuple[object, ...] = ()) -> Route:
    return Route(name=name, match=RouteMatch(path=PathMatch(kind=kind, value=path),
                                             headers=headers),
                 action=Forward(backends=(WeightedPool(pool="pool/default/web/80"),)),
                 filters=filters, origin=ORIGIN)  # type: ignore[arg-type]


def _ir(*routes: Route, members: tuple[Member, ...] = (Member(address="10.0.0.1", port=80),)
        ) -> IR:
    vhost = VirtualHost(name="vh/shop.test", hostname="shop.test", routes=routes)
    listener = Listener(name="ingress/http", address="127.0.0.1", port=8080,
                        protocol=ListenerProtocol.HTTP, virtual_hosts=(vhost,), origins=(ORIGIN,))
    pool = Pool(name="pool/default/web/80", members=members)
    return IR(listeners=(listener,), pools=MappingProxyType({pool.name: pool}))


def test_prefixes_match_whole_path_segments() -> None:
    """/v1 matches /v1 and /v1/x, never /v10; a trailing slash in the prefix does not count."""
    for value in ("/v1", "/v1/"):
        regex = path_regex(PathMatch(kind=PathKind.PREFIX, value=value))
        assert regex is not None
        assert [bool(re.search(regex, p)) for p in ("/v1", "/v1/x", "/v10", "/v")] == \
            [True, True, False, False]
    exact = path_regex(PathMatch(kind=PathKind.EXACT, value="/a.b"))
    assert exact is not None
    assert [bool(re.search(exact, p)) for p in ("/a.b", "/axb", "/a.b/")] == [True, False, False]
    assert path_regex(PathMatch(kind=PathKind.PREFIX, value="/")) is None


def test_status_regex_matches_exactly_the_ranges() -> None:
    """Health check statuses: whole hundreds compress, the rest are listed."""
    regex = status_regex(((200, 399), (404, 405)))
    ok = {c for c in range(100, 600) if re.fullmatch(regex, str(c))}
    assert ok == set(range(200, 400)) | {404, 405}


def test_members_keep_their_slot_and_fill_free_ones() -> None:
    """A member that stays keeps its slot; a new one takes a slot that was empty, not the one
    a leaving member just freed (that is reused only when nothing else is left)."""
    a, b, c, d, e = (Member(address="10.0.0.1", port=p) for p in (1, 2, 3, 4, 5))
    first = slots.assign((a, b), None)
    assert first == (("10.0.0.1", 1), ("10.0.0.1", 2), None, None)
    second = slots.assign((b, c), first)
    assert second == (None, ("10.0.0.1", 2), ("10.0.0.1", 3), None)
    third = slots.assign((b, c, d, e), second)
    assert third == (("10.0.0.1", 4), ("10.0.0.1", 2), ("10.0.0.1", 3), ("10.0.0.1", 5))
    grown = slots.assign(tuple(Member(address="10.0.0.1", port=p) for p in range(1, 6)), second)
    assert len(grown) == 8


def test_a_swap_brings_the_new_server_up_before_the_old_goes_down() -> None:
    """One member replaced by another: the new slot is enabled first, then the old one is
    put in maintenance, so the pool is never empty in between."""
    old_member, new_member = Member(address="10.0.0.1", port=1), Member(address="10.0.0.2", port=2)
    before_slots = slots.assign((old_member,), None)
    after_slots = slots.assign((new_member,), before_slots)
    got = slots.commands("be", slots.slot_states((old_member,), before_slots),
                         slots.slot_states((new_member,), after_slots))
    assert got == ["set server be/s2 addr 10.0.0.2 port 2", "set server be/s2 state ready",
                   "set server be/s1 state maint"]


def test_member_commands_take_a_slot_out_before_moving_it() -> None:
    """A slot that changes address goes to maintenance first, then gets address and state."""
    old = slots.slot_states((Member(address="10.0.0.1", port=1),), (("10.0.0.1", 1), None))
    new = slots.slot_states((Member(address="10.0.0.2", port=2, weight=3),
                             Member(address="10.0.0.3", port=3, state=MemberState.DRAINING)),
                            (("10.0.0.2", 2), ("10.0.0.3", 3)))
    assert slots.commands("be", old, new) == [
        "set server be/s1 state maint",
        "set server be/s1 addr 10.0.0.2 port 2",
        "set server be/s1 weight 3",
        "set server be/s1 state ready",
        "set server be/s2 addr 10.0.0.3 port 3",
        "set server be/s2 weight 0",  # draining: no new requests
        "set server be/s2 state ready",
    ]



def test_a_checked_slot_comes_up_marked_down_until_its_first_check() -> None:
    """HAProxy 2.6 counts a server leaving maintenance as up until a check fails: a checked
    slot comes up at weight 0, is marked down, and only then gets its weight, so it takes no
    request before its first check passes. An unchecked slot is simply enabled."""
    old = Member(address="10.0.0.1", port=1)
    new = Member(address="10.0.0.2", port=2, weight=3)
    before_slots = slots.assign((old,), None)
    after_slots = slots.assign((old, new), before_slots)
    checked = slots.commands(
        "be", slots.slot_states((old,), before_slots, checked=True),
        slots.slot_states((old, new), after_slots, checked=True))
    assert checked == ["set server be/s2 addr 10.0.0.2 port 2", "set server be/s2 weight 0",
                       "set server be/s2 state ready", "set server be/s2 health down",
                       "set server be/s2 weight 3"]
    plain = slots.commands("be", slots.slot_states((old,), before_slots),
                           slots.slot_states((old, new), after_slots))
    assert plain == ["set server be/s2 addr 10.0.0.2 port 2", "set server be/s2 weight 3",
                     "set server be/s2 state ready"]
    # moved under traffic, and a not-ready member (weight 0 stays 0)
    later = Member(address="10.0.0.3", port=3, state=MemberState.NOT_READY)
    assert slots.commands(
        "be", slots.slot_states((old,), (("10.0.0.1", 1),), checked=True),
        slots.slot_states((later,), (("10.0.0.3", 3),), checked=True)) == [
        "set server be/s1 state maint", "set server be/s1 addr 10.0.0.3 port 3",
        "set server be/s1 weight 0", "set server be/s1 state ready",
        "set server be/s1 health down"]
    # a slot that stays up only changes weight: it is not checked afresh
    heavier = dataclasses.replace(old, weight=5)
    assert slots.commands(
        "be", slots.slot_states((old,), before_slots, checked=True),
        slots.slot_states((heavier,), before_slots, checked=True)) == [
        "set server be/s1 weight 5"]


def test_a_pool_with_an_active_check_renders_checked_slots() -> None:
    """The slots of a backend whose servers are checked say so (``commands`` reads it)."""
    plain = _ir(_route("r/0"))
    pool = next(iter(plain.pools.values()))
    checked = dataclasses.replace(pool, settings=dataclasses.replace(
        pool.settings, health_check=HealthCheck(kind=HealthCheckKind.TCP)))
    with_check = render(dataclasses.replace(
        plain, pools=MappingProxyType({pool.name: checked})), OPTS)
    assert all(state.checked for states in with_check.servers.values() for state in states)
    without = render(plain, OPTS)
    assert not any(state.checked for states in without.servers.values() for state in states)


def test_not_ready_members_stay_checked_but_get_no_traffic() -> None:
    """A not-ready member (held back by the readiness gate) keeps its checks: weight 0, not
    maintenance (HAProxy does not check a server in maintenance)."""
    member = Member(address="10.0.0.1", port=1, state=MemberState.NOT_READY)
    (state,) = slots.slot_states((member,), (("10.0.0.1", 1),))
    assert (state.weight, state.state) == (0, "ready")


def test_only_members_changed_keeps_the_skeleton() -> None:
    """A member change leaves the skeleton (no reload); the servers differ."""
    one = render(_ir(_route("r/0")), OPTS)
    two = render(_ir(_route("r/0"), members=(Member(address="10.0.0.9", port=81),)),
                 OPTS.__class__(folder="/s", runtime_socket="/s/runtime.sock", slots=one.slots))
    assert one.skeleton == two.skeleton
    assert one.servers != two.servers


def test_a_plain_route_is_a_map_row_a_header_route_a_rule() -> None:
    """Adding a path-only route changes maps only; a header match changes the config."""
    base = render(_ir(_route("r/1", "/api"), _route("r/0")), OPTS)
    plain = render(_ir(_route("r/2", "/v2", kind=PathKind.EXACT), _route("r/1", "/api"),
                       _route("r/0")), OPTS)
    assert plain.skeleton == base.skeleton
    assert plain.maps != base.maps
    header = render(_ir(_route("r/2", "/v2", headers=(HeaderMatch(name="x-v", value="2"),)),
                        _route("r/1", "/api"), _route("r/0")), OPTS)
    assert header.skeleton != base.skeleton
    assert "{ req.fhdr(x-v) -m str 2 }" in header.config


def _pools(*routes: Route) -> tuple[Route, ...]:
    return tuple(dataclasses.replace(r, action=Forward(backends=(
        WeightedPool(pool=f"pool/{r.name}"),))) for r in routes)


def test_hosts_with_only_the_root_prefix_are_looked_up_without_the_end_mark() -> None:
    """Exact hosts whose routes are all prefix "/": their base rows all end with "/", so the
    key is ``base`` alone (no "?" concatenated, ~300 instructions a request) and the "/?" rows
    are gone; each host still gets its own backend for every path. A first route whose row
    needs "?" (an exact path, a prefix's own path) brings the "?" back: a reload."""
    ir = _ir(*_pools(_route("r/a")))
    two = dataclasses.replace(ir.listeners[0].virtual_hosts[0], name="vh/two.test",
                              hostname="two.test", routes=_pools(_route("r/b")))
    ir = dataclasses.replace(ir, listeners=(dataclasses.replace(
        ir.listeners[0], virtual_hosts=(*ir.listeners[0].virtual_hosts, two)),))
    out = render(ir, OPTS)
    assert "  use_backend %[base,map_beg(/s/maps/fe:ingress:http.base.map)] unless " \
        "{ var(txn.k) -m found }" in out.config.splitlines()
    assert "concat" not in out.config
    base = dict(out.maps["maps/fe:ingress:http.base.map"])
    assert not [k for k in base if k.endswith("?")]
    for host, route in (("shop.test", "r/a"), ("shop.test.", "r/a"), ("two.test", "r/b")):
        for path in ("/", "/api", "/api/x?", "/?"):
            key = host + path
            found = max((k for k in base if key.startswith(k)), key=len, default=None)
            assert (key, found and base[found]) == (key, backend_name(f"pool/{route}"))
    exact = dataclasses.replace(two, routes=_pools(_route("r/c", "/x", kind=PathKind.EXACT),
                                                   _route("r/b")))
    more = render(dataclasses.replace(ir, listeners=(dataclasses.replace(
        ir.listeners[0], virtual_hosts=(ir.listeners[0].virtual_hosts[0], exact)),)), OPTS)
    assert more.skeleton != out.skeleton
    assert "  use_backend %[base,concat(,,?),map_beg(/s/maps/fe:ingress:http.base.map)]" \
        " unless { var(txn.k) -m found }" in more.config.splitlines()
    assert ("two.test/x?", backend_name("pool/r/c")) in more.maps["maps/fe:ingress:http.base.map"]


def test_the_catch_all_alone_with_one_root_route_names_its_backend() -> None:
    """The ``*`` host alone with one prefix "/" route: every path beginning with "/" goes to
    its backend (``path_beg /``, no map lookup, no name built per request); anything else
    (``OPTIONS *``) has no route, as with the map. No rule names the base map. A second route
    makes it the path lookup again (a reload)."""
    out = render(_catch_all_only(*_pools(_route("r/a"))), OPTS)
    chosen = [line for line in out.config.splitlines() if "use_backend" in line]
    assert chosen == [f"  use_backend {backend_name('pool/r/a')} if {{ path_beg / }}"]
    assert "maps/fe:ingress:http.base.map" not in out.maps
    assert "  default_backend nr:ingress:http" in out.config.splitlines()
    more = render(_catch_all_only(*_pools(_route("r/b", "/api"), _route("r/a"))), OPTS)
    assert more.skeleton != out.skeleton
    assert [line for line in more.config.splitlines() if "use_backend" in line] == [
        "  use_backend %[path,concat(,,?),map_beg(/s/maps/fe:ingress:http.base.map)]"]


def _first_match(routes: tuple[Route, ...], path: str) -> str | None:
    for route in routes:
        regex = path_regex(route.match.path)
        if regex is None or re.search(regex, path):
            return route.name
    return None


def _tree(rendered: Rendered, path: str) -> str | None:
    """The route HAProxy's lookup picks: the longest path-map key that begins the request's
    ``<virtual host>@<path>?`` (each route forwards to a pool named after it)."""
    rows = {name.rsplit(".", 2)[-2]: dict(rows) for name, rows in rendered.maps.items()}
    paths = {k.split("@", 1)[1]: v for k, v in rows["paths"].items()}
    key = f"{path}?"
    found = max((p for p in paths if key.startswith(p)), key=len, default=None)
    pools = {backend_name(f"pool/{n}"): n for n in ("r/exact", "r/api", "r/api-v1", "r/all",
                                                     "r/apix")}
    return pools[paths[found]] if found is not None else None


def test_path_maps_pick_what_first_match_picks() -> None:
    """The longest-prefix lookup (one tree) gives the IR's first match on every path."""
    routes = (_route("r/exact", "/api/health", kind=PathKind.EXACT),
              _route("r/api-v1", "/api/v1/"), _route("r/apix", "/apix"),
              _route("r/api", "/api"), _route("r/all"))
    routes = tuple(dataclasses.replace(r, action=Forward(backends=(
        WeightedPool(pool=f"pool/{r.name}"),))) for r in routes)
    out = render(_ir(*routes), OPTS)
    for path in ("/", "/api", "/api/", "/api/health", "/api/health/x", "/api/v1", "/api/v1/x",
                 "/api/v10", "/apix", "/apix/y", "/apixy", "/other"):
        assert (path, _tree(out, path)) == (path, _first_match(routes, path))


def test_the_base_map_picks_what_the_path_map_picks_and_stays_a_map_edit() -> None:
    """Exact hosts only: "<host><path>?" (HAProxy's ``base`` with "?") in the base map gives
    the backend the path map gives for every path and both spellings of the host; a Host
    written otherwise is keyed first (``txn.k``), which turns the base lookup off; a new
    host or route changes rows only (no reload)."""
    routes = (_route("r/exact", "/api/health", kind=PathKind.EXACT),
              _route("r/api-v1", "/api/v1/"), _route("r/apix", "/apix"),
              _route("r/api", "/api"), _route("r/all"))
    routes = tuple(dataclasses.replace(r, action=Forward(backends=(
        WeightedPool(pool=f"pool/{r.name}"),))) for r in routes)
    out = render(_ir(*routes), OPTS)
    base = dict(out.maps["maps/fe:ingress:http.base.map"])
    pools = {backend_name(f"pool/{r.name}"): r.name for r in routes}
    for host in ("shop.test", "shop.test."):
        for path in ("/", "/api", "/api/health", "/api/health/x", "/api/v1", "/api/v10",
                     "/apix", "/apixy", "/other"):
            key = f"{host}{path}?"
            found = max((k for k in base if key.startswith(k)), key=len, default=None)
            picked = pools[base[found]] if found is not None else None
            assert (key, picked) == (key, _tree(out, path))
    lines = out.config.splitlines()
    keyed = next(i for i, line in enumerate(lines) if "set-var-fmt(txn.k)" in line)
    assert lines[keyed].endswith(
        "unless { req.fhdr(host,1) -m str -M -f /s/maps/fe:ingress:http.hosts.map }")
    fast = lines.index("  use_backend %[base,concat(,,?),map_beg(/s/maps/fe:ingress:http.base"
                       ".map)] unless { var(txn.k) -m found }")
    assert lines[fast + 1].startswith("  use_backend %[var(txn.k),map_beg(")
    more = _ir(*routes)
    vhost = dataclasses.replace(more.listeners[0].virtual_hosts[0], name="vh/two.test",
                                hostname="two.test")
    listener = dataclasses.replace(more.listeners[0], virtual_hosts=(
        *more.listeners[0].virtual_hosts, vhost))
    two = render(dataclasses.replace(more, listeners=(listener,)), OPTS)
    assert two.skeleton == out.skeleton
    assert ("two.test/api/", backend_name("pool/r/api")) in \
        two.maps["maps/fe:ingress:http.base.map"]


def test_a_catch_all_is_the_host_maps_default_in_one_rule() -> None:
    """A catch-all virtual host (no wildcard, no rules): the key is formatted in one rule with
    the catch-all's key as the host map's default; no ``txn.vh``, no base map."""
    ir = _ir(_route("r/0"))
    catch_all = dataclasses.replace(ir.listeners[0].virtual_hosts[0], name="vh/any",
                                    hostname="*")
    listener = dataclasses.replace(ir.listeners[0], virtual_hosts=(
        *ir.listeners[0].virtual_hosts, catch_all))
    out = render(dataclasses.replace(ir, listeners=(listener,)), OPTS)
    keyed = [line for line in out.config.splitlines() if "txn.k" in line or "txn.vh" in line]
    hosts = dict(out.maps["maps/fe:ingress:http.hosts.map"])
    assert keyed[0] == ("  http-request set-var-fmt(txn.k) %[req.hdr(host),lower,field(1,:),"
                        "map_str(/s/maps/fe:ingress:http.hosts.map,"
                        f"{vhost_key('vh/any')})]@%[path]?")
    assert hosts["shop.test"] != vhost_key("vh/any")
    assert keyed[1:] == ["  use_backend %[var(txn.k),map_beg(/s/maps/fe:ingress:http.paths.map)]"]
    assert "maps/fe:ingress:http.base.map" not in out.maps


def _catch_all_only(*routes: Route) -> IR:
    ir = _ir(*routes)
    alone = dataclasses.replace(ir.listeners[0].virtual_hosts[0], name="vh/any", hostname="*")
    return dataclasses.replace(ir, listeners=(dataclasses.replace(
        ir.listeners[0], virtual_hosts=(alone,)),))


def test_the_catch_all_alone_is_looked_up_by_path_and_stays_a_map_edit() -> None:
    """The ``*`` host alone: no key rule and no variable; the path with "?" in the base map,
    whose rows are the catch-all's path-map keys, picks what the path map would for every
    path. A new path route is a map edit (the only map a rule names); a first exact host
    changes the rules (a reload)."""
    routes = (_route("r/exact", "/api/health", kind=PathKind.EXACT),
              _route("r/api-v1", "/api/v1/"), _route("r/apix", "/apix"),
              _route("r/api", "/api"), _route("r/all"))
    routes = tuple(dataclasses.replace(r, action=Forward(backends=(
        WeightedPool(pool=f"pool/{r.name}"),))) for r in routes)
    out = render(_catch_all_only(*routes), OPTS)
    keyed = [line for line in out.config.splitlines() if "txn." in line or "use_backend" in line]
    assert keyed == ["  use_backend %[path,concat(,,?),map_beg(/s/maps/fe:ingress:http.base.map)]"]
    assert "maps/fe:ingress:http.paths.map" not in out.maps  # no rule names it
    base = dict(out.maps["maps/fe:ingress:http.base.map"])
    with_vh = render(_ir(*routes), OPTS)  # the same routes under an exact host: the path map
    pools = {backend_name(f"pool/{r.name}"): r.name for r in routes}
    for path in ("/", "/api", "/api/", "/api/health", "/api/health/x", "/api/v1", "/api/v10",
                 "/apix", "/apix/y", "/apixy", "/other"):
        key = f"{path}?"
        found = max((k for k in base if key.startswith(k)), key=len, default=None)
        picked = pools[base[found]] if found is not None else None
        assert (path, picked) == (path, _tree(with_vh, path))
    fewer = render(_catch_all_only(*routes[1:]), OPTS)
    assert fewer.skeleton == out.skeleton
    assert fewer.maps["maps/fe:ingress:http.base.map"] != out.maps[
        "maps/fe:ingress:http.base.map"]
    ir = _catch_all_only(*routes)
    named = dataclasses.replace(_ir(*routes).listeners[0].virtual_hosts[0])
    listener = dataclasses.replace(ir.listeners[0], virtual_hosts=(
        named, *ir.listeners[0].virtual_hosts))
    assert render(dataclasses.replace(ir, listeners=(listener,)), OPTS).skeleton != out.skeleton


def test_an_order_the_tree_cannot_follow_becomes_rules() -> None:
    """A prefix before a longer path under it (first match would never reach the latter) is
    served by ordered rules, not by the tree."""
    assert tree_safe((_route("r/api", "/api/v1"), _route("r/all")))
    assert not tree_safe((_route("r/all"), _route("r/api", "/api")))
    assert not tree_safe((_route("r/api", "/api"), _route("r/x", "/api", kind=PathKind.EXACT)))
    out = render(_ir(_route("r/all"), _route("r/api", "/api")), OPTS)
    chosen = [line for line in out.config.splitlines() if "set-var(txn.r) str(" in line]
    # In IR order, each naming its backend (plain forwards need no route key), and the
    # backend taken from txn.r; no path-map row.
    assert [("path -m reg" in line) for line in chosen] == [False, True]
    assert all(f"str({backend_name('pool/default/web/80')}) if" in line for line in chosen)
    assert "  use_backend %[var(txn.r)]" in out.config
    assert out.maps["maps/fe:ingress:http.paths.map"] == ()


def test_unenforceable_limits_fail_closed_and_are_reported() -> None:
    """A rate limit HAProxy does not enforce answers 500; a mirror is served unmirrored, both
    reported on the route's object."""
    limited = _route("r/limited", filters=(RateLimit(requests=1, burst=1),))
    mirrored = _route("r/mirrored", "/m", filters=(Mirror(pool="pool/default/web/80"),))
    out = render(_ir(mirrored, limited), OPTS)
    assert {(u.subject, u.origin) for u in out.unsupported} == {
        ("r/limited", ORIGIN), ("r/mirrored", ORIGIN)}
    assert any("return status 500" in line and "rate" not in line
               for line in out.config.splitlines())


def test_words_are_quoted_literally() -> None:
    """Config words with spaces or `$` are single-quoted (no expansion); plain ones bare."""
    assert word("abc") == "abc"
    assert word("a b") == "'a b'"
    assert word("^x$") == "'^x$'"


def test_a_draining_member_that_still_serves_is_a_backup_server() -> None:
    """Rollout fallback (``Member.serving``): a terminating member that still serves leaves its
    active slot for a backup slot with its weight (HAProxy sends there only while no active
    server is usable); a draining member that no longer serves stays active at weight 0.
    Backup slots appear only once a pool needs one, then stay (runtime edits after)."""
    ready = Member(address="10.0.0.1", port=80)
    plain = render(_ir(_route("r/0"), members=(ready,)), OPTS)
    assert "backup" not in plain.config
    assert plain.backups == {}
    old = Member(address="10.0.0.1", port=80, weight=2, state=MemberState.DRAINING, serving=True)
    gone = Member(address="10.0.0.3", port=80, state=MemberState.DRAINING)
    new = Member(address="10.0.0.2", port=80, state=MemberState.NOT_READY)
    rolled = render(_ir(_route("r/0"), members=(old, gone, new)),
                    RenderOptions(folder="/s", runtime_socket="/s/runtime.sock",
                                  slots=plain.slots))
    lines = [ln.strip() for ln in rolled.config.splitlines() if ln.strip().startswith("server")]
    assert "server b1 10.0.0.1:80 weight 2 backup" in lines
    assert "server s2 10.0.0.3:80 weight 0" in lines
    assert "server s3 10.0.0.2:80 weight 0" in lines
    assert "server s1 0.0.0.0:0 weight 1 disabled" in lines  # its old slot, emptied
    assert rolled.backups == {"pool/default/web/80": (("10.0.0.1", 80), None, None, None)}
    assert rolled.skeleton != plain.skeleton  # the first backup slots: a reload, once
    done = render(_ir(_route("r/0"), members=(Member(address="10.0.0.2", port=80),)),
                  RenderOptions(folder="/s", runtime_socket="/s/runtime.sock",
                                slots=rolled.slots, backups=rolled.backups))
    assert done.skeleton == rolled.skeleton  # the next change is runtime edits
    backend = next(iter(done.servers))
    assert slots.commands(backend, rolled.servers[backend], done.servers[backend]) == [
        f"set server {backend}/s3 weight 1", f"set server {backend}/s2 state maint",
        f"set server {backend}/b1 state maint"]


def test_a_listener_sets_listener_findings_land_on_the_set() -> None:
    """A listener-wide finding (here: UDP, which HAProxy does not serve) of an engine listener
    that only a ListenerSet's listener makes is reported on that set, not on its Gateway."""
    from podway.ir import ListenerSection

    gateway = ObjectRef(kind="Gateway", namespace="infra", name="gw")
    team = ObjectRef(kind="ListenerSet", namespace="team", name="team")
    udp = Listener(name="gateway/infra/gw/5353/udp", address="127.0.0.1", port=5353,
                   protocol=ListenerProtocol.UDP, origins=(gateway,),
                   sections=(ListenerSection(origin=team, name="dns"),))
    out = render(IR(listeners=(udp,), pools=MappingProxyType({})), OPTS)
    assert [(u.subject, u.origin) for u in out.unsupported] == [(udp.name, team)]


def test_bind_failures_name_the_listeners_haproxy_could_not_bind() -> None:
    """HAProxy 2.6's reload alert for a port another program holds names the frontend: it maps
    back to the IR listener, with the address in the reason; other frontends and lines do not."""
    from podway.haproxy.binds import bind_failures

    lines = [
        "[NOTICE]   (7065) : Reloading HAProxy",
        "[ALERT]    (7065) : Binding [haproxy.cfg:12] for frontend fe_b: cannot bind socket "
        "(Address already in use) for [127.0.0.1:41179]",
        "[ALERT]    (7065) : Binding [haproxy.cfg:20] for frontend fe_gone: cannot bind socket "
        "(Permission denied) for [127.0.0.1:80]",
        "[WARNING]  (7065) : Loading failure!",
    ]
    found = bind_failures(lines, {"fe_a": "gateway/infra/gw/80", "fe_b": "gateway/infra/gw/8443"})
    assert [name for name, _ in found] == ["gateway/infra/gw/8443"]
    assert "127.0.0.1:41179" in found[0][1]
    assert "Address already in use" in found[0][1]


def test_listeners_have_one_owner_unless_reuse_port_is_asked() -> None:
    """HAProxy binds with SO_REUSEPORT unless told not to: by default Podway tells it
    (``noreuseport``), so a second instance cannot split a port; ``reuse_port`` (the engine's
    --listener-reuse-port) lets a successor bind beside it."""
    global_section = lambda cfg: cfg.split("\ndefaults", 1)[0].splitlines()  # noqa: E731
    assert "  noreuseport" in global_section(render(IR(), OPTS).config)
    shared = render(IR(), dataclasses.replace(OPTS, reuse_port=True)).config
    assert "noreuseport" not in shared
    assert "reuseport" not in "".join(global_section(shared))


def test_every_bind_prefers_aes128_and_resumes_without_tickets() -> None:
    """The TLS settings every bind inherits: the three TLS 1.3 suites, AES-128-GCM first, and
    no session tickets (sessions resume from HAProxy's cache); nothing else TLS-wide."""
    text = render(_ir(_route("r")), OPTS).config
    head = text.split("\ndefaults\n", 1)[0].splitlines()
    assert [line for line in head if line.startswith("  ssl-")] == [
        "  ssl-default-bind-ciphersuites TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
        "TLS_CHACHA20_POLY1305_SHA256",
        "  ssl-default-bind-options no-tls-tickets"]


def test_the_peer_is_appended_first_and_printed_without_printf_on_ipv4() -> None:
    """X-Forwarded-For is the first header rule (a route's own header filter comes after it
    and wins, as on Envoy); an IPv4 listener prints the peer with ``be2dec``, any other with
    ``src``; no ``option forwardfor`` (which adds it after every rule)."""
    header = HeaderMatch(name="x-v", value="2")
    ir = _ir(_route("r/1", "/api", headers=(header,)), _route("r/0"))
    for address, printed in (("127.0.0.1", "src,be2dec(.,1)"), ("::1", "src")):
        listener = dataclasses.replace(ir.listeners[0], address=address)
        lines = render(dataclasses.replace(ir, listeners=(listener,)), OPTS).config.splitlines()
        rules = [line for line in lines if line.startswith("  http-request ")]
        assert rules[0] == f"  http-request add-header x-forwarded-for %[{printed}]"
        assert "  option forwardfor" not in lines


def test_the_pattern_cache_is_kept_only_for_regex_lookups() -> None:
    """One-pattern substring checks cost more through HAProxy's pattern cache than without;
    a regex lookup (here a wildcard host's ``map_reg``) keeps it."""
    plain = render(_ir(_route("r/0")), OPTS).config
    assert "  tune.pattern.cache-size 0\n" in plain
    ir = _ir(_route("r/0"))
    wild = dataclasses.replace(ir.listeners[0].virtual_hosts[0], name="vh/wild",
                               hostname="*.shop.test")
    listener = dataclasses.replace(ir.listeners[0], virtual_hosts=(
        *ir.listeners[0].virtual_hosts, wild))
    out = render(dataclasses.replace(ir, listeners=(listener,)), OPTS).config
    assert "map_reg(" in out
    assert "tune.pattern.cache-size" not in out
