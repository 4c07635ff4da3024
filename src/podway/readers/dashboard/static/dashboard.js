// Podway dashboard: renders /api/events (server-sent events) with plain DOM calls.
// Every text goes through textContent: object names and messages are never parsed as HTML.
"use strict";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function table(headers, rows) {
  if (!rows.length) return el("p", {class: "empty"}, "None.");
  return el("table", {},
    el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, ...rows));
}

function rate(t) {
  if (!t) return ["", "", ""];
  const rps = t.rps === null ? "…" : t.rps.toFixed(1) + "/s";
  const err = t.error_ratio === null ? "–" : (100 * t.error_ratio).toFixed(1) + "%";
  const p99 = t.p99_ms === null || t.p99_ms === undefined ? "–" : t.p99_ms.toFixed(1) + " ms";
  return [rps, err, p99];
}

function verdictCell(route) {
  const cls = route.verdict === "ok" ? "verdict-ok"
    : route.verdict === "redirect" ? "verdict-redirect" : "verdict-error";
  const cell = el("td", {class: cls, title: route.why}, route.verdict);
  if (route.explain) {
    cell.append(" ", el("a", {href: route.explain.href, class: "explain",
                              title: route.explain.command}, "explain"));
  }
  return cell;
}

function renderListeners(doc) {
  const root = document.getElementById("listeners");
  if (!doc.ready) { root.replaceChildren(el("p", {class: "empty"}, "Waiting for the first state…")); return; }
  if (!doc.listeners.length) { root.replaceChildren(el("p", {class: "empty"}, "No listener.")); return; }
  root.replaceChildren(...doc.listeners.map((ls) => {
    const [rps, err, p99] = rate(ls.traffic);
    const rows = [];
    for (const vh of ls.virtual_hosts) {
      for (const r of vh.routes) {
        const traffic = r.traffic.length ? rate(r.traffic[0]) : ["", "", ""];
        rows.push(el("tr", {"data-route": r.name, "data-verdict": r.verdict},
          el("td", {}, vh.hostname), el("td", {}, el("code", {}, r.match)),
          el("td", {}, r.action), el("td", {}, r.pools.map((p) => p.name).join(", ")),
          verdictCell(r), el("td", {}, traffic[0]), el("td", {}, traffic[1]),
          el("td", {}, traffic[2]), el("td", {class: "muted"}, r.origin)));
      }
    }
    for (const r of ls.l4_routes) {
      rows.push(el("tr", {"data-route": r.name},
        el("td", {}, r.hostnames.join(", ") || "*"), el("td", {}, "L4"), el("td", {}, "forward"),
        el("td", {}, r.pools.join(", ")), el("td", {}, ""), el("td", {}, ""), el("td", {}, ""),
        el("td", {}, ""), el("td", {class: "muted"}, r.origin)));
    }
    return el("div", {class: "card", "data-listener": ls.name},
      el("h3", {}, `${ls.protocol} ${ls.address}:${ls.port}`, " ",
         el("span", {class: "muted"}, `${ls.name}`),
         ls.traffic ? el("span", {class: "muted"}, ` · ${rps} · 5xx ${err} · p99 ${p99}`) : null),
      table(["host", "match", "action", "pools", "verdict", "rate", "5xx", "p99", "from"], rows));
  }));
}

function renderPools(doc) {
  const root = document.getElementById("pools");
  if (!doc.pools.length) { root.replaceChildren(el("p", {class: "empty"}, "No pool.")); return; }
  root.replaceChildren(...doc.pools.map((pool) => {
    const [rps, err, p99] = rate(pool.traffic);
    const rows = pool.members.map((m) => el("tr", {
        "data-member": `${pool.name}|${m.address}:${m.port}`, "data-health": m.health},
      el("td", {}, `${m.address}:${m.port}`), el("td", {}, m.mode),
      el("td", {class: "health-" + m.health, title: m.why}, m.health),
      el("td", {class: "muted"}, m.why), el("td", {}, m.node), el("td", {}, m.origin),
      el("td", {}, m.weight)));
    return el("div", {class: "card", "data-pool": pool.name},
      el("h3", {}, pool.name, " ",
         el("span", {class: "muted"},
            `${pool.healthy}/${pool.members.length} healthy · ${pool.protocol} · ${pool.lb_policy}`
            + (pool.health_check ? ` · ${pool.health_check}` : " · no active health check")
            + (pool.traffic ? ` · ${rps} · 5xx ${err} · p99 ${p99}` : ""))),
      table(["member", "mode", "health", "why", "node", "origin", "weight"], rows));
  }));
}

function renderProblems(doc) {
  document.getElementById("problem-count").textContent =
    doc.problem_count > doc.problems.length ? `(${doc.problems.length} of ${doc.problem_count})`
      : `(${doc.problem_count})`;
  document.getElementById("problems").replaceChildren(table(
    ["severity", "object", "reason", "message"],
    doc.problems.map((p) => el("tr", {},
      el("td", {}, p.severity), el("td", {}, p.object), el("td", {}, p.reason),
      el("td", {}, p.message + (p.field ? ` (${p.field})` : ""))))));
  const nack = (n) => [el("td", {}, n.node), el("td", {}, n.type), el("td", {}, n.resource),
                       el("td", {}, n.message)];
  document.getElementById("rejections").replaceChildren(table(
    ["engine", "type", "resource", "message"],
    doc.rejections.map((n) => el("tr", {}, ...nack(n)))));
  document.getElementById("recent-nacks").replaceChildren(table(
    ["seen", "engine", "type", "resource", "message"],
    doc.recent_nacks.map((n) => el("tr", {}, el("td", {}, n.at), ...nack(n)))));
}

function render(doc) {
  renderListeners(doc);
  renderPools(doc);
  renderProblems(doc);
  document.getElementById("summary").textContent = doc.ready
    ? `generation ${doc.generation} · mode ${doc.mode || "?"} · refresh ${doc.refresh_s}s`
    : "starting";
  document.getElementById("stats-note").textContent = !doc.engine.known
    ? "No engine is known to this process (a controller's engines are remote; "
      + "--engine-admin unix:PATH names a co-located one): members show Kubernetes "
      + "readiness only, no live health and no traffic figures."
    : !doc.engine.seen
    ? "No engine figures yet (no engine, or nobody watched long enough for two samples)."
    : doc.engine.detailed_stats ? ""
    : "Per-route figures need per-pool stats: start with --envoy-stats detailed. "
      + "Listener figures are shown.";
  document.body.dataset.version = doc.ready ? String(doc.version) : "0";
  window.podwayRenders = (window.podwayRenders || 0) + 1;
}

function connect() {
  const conn = document.getElementById("conn");
  const source = new EventSource("/api/events");
  source.onopen = () => { conn.textContent = "live"; conn.className = "conn live"; };
  source.onmessage = (event) => render(JSON.parse(event.data));
  source.onerror = () => { conn.textContent = "reconnecting…"; conn.className = "conn down"; };
}

connect();
