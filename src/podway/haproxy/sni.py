"""421 Misdirected Request on HTTPS listeners with ``sni_host_check`` (Gateway API).

The connection's certificate is the one whose SNI name most specifically covers the client's
name (a wildcard covers any number of labels, exact names first, as ``podway.ir.hosts``); a
virtual host belongs to the certificate whose name most specifically covers its hostname. A
request whose virtual host belongs to another certificate than its connection's is answered
421. Names in two certificates count for the first only. Both lookups are maps, like hosts.
"""

from __future__ import annotations

from podway.haproxy.names import digest, regex_literal, vhost_key
from podway.ir import Listener, WildcardMode
from podway.ir.hosts import covers, host_order

DEFAULT = "-"  # no certificate name covers it: the default certificate's connection


def chains(listener: Listener) -> list[tuple[str, tuple[str, ...]]]:
    """(chain key, SNI names) per certificate, each name in its first certificate only."""
    out = []
    seen: set[str] = set()
    for cert in listener.certificates:
        names = tuple(h.lower() for h in cert.hostnames if h.lower() not in seen)
        seen.update(names)
        if names:
            out.append(("c" + digest(cert.name), names))
    return out


def default_chain(listener: Listener, named: list[tuple[str, tuple[str, ...]]]) -> str:
    first = sorted(listener.certificates, key=lambda c: bool(c.hostnames))[0]
    key = "c" + digest(first.name)
    return key if any(k == key for k, _ in named) else DEFAULT


def owner(host: str, named: list[tuple[str, tuple[str, ...]]]) -> str:
    found = [(host_order(n), key) for key, names in named for n in names
             if covers(n, host, WildcardMode.SUFFIX)]
    return min(found)[1] if found else DEFAULT


def sni_rules(listener: Listener, fe: str, folder: str
              ) -> tuple[list[str], tuple[tuple[str, tuple[tuple[str, str], ...]], ...]]:
    """The frontend lines (after ``txn.vh`` is set) and their maps."""
    named = chains(listener)
    exact = tuple((n, key) for key, names in named for n in names if not n.startswith("*"))
    wild = tuple((f"^.+{regex_literal(n[1:])}$", key) for _, key, n in sorted(
        (host_order(n), key, n) for key, names in named for n in names if n.startswith("*.")))
    owners = tuple((vhost_key(v.name), owner(v.hostname.lower(), named))
                   for v in listener.virtual_hosts)
    m_exact, m_wild, m_owner = (f"maps/{fe}.sni.map", f"maps/{fe}.sniwild.map",
                                f"maps/{fe}.owner.map")
    lines = [
        f"  http-request set-var(txn.sc) ssl_fc_sni,lower,map_str({folder}/{m_exact})",
        f"  http-request set-var(txn.sc) ssl_fc_sni,lower,map_reg({folder}/{m_wild})"
        " unless { var(txn.sc) -m found }",
        # No SNI, or one no name covers: HAProxy shows the default certificate (the crt-list's
        # first row, podway.haproxy.tls), whose hosts the connection is then served.
        f"  http-request set-var(txn.sc) str({default_chain(listener, named)})"
        " unless { var(txn.sc) -m found }",
        f"  http-request set-var(txn.vc) var(txn.vh),map_str({folder}/{m_owner})",
        "  http-request return status 421 if { var(txn.vc) -m found }"
        " !{ var(txn.vc),strcmp(txn.sc) eq 0 }",
    ]
    return lines, ((m_exact, exact), (m_wild, wild), (m_owner, owners))
