// The cluster: every node, the partition map (table x partition) and every replica's lag.

import { metadata } from "./api.js";
import { h, hostOf, link, num, replace, section, table } from "./dom.js";
import { replicaLags } from "./lags.js";

const seen = new Map(); // node URL -> its label, for as long as the page is open

function label(url) {
  if (!seen.has(url)) seen.set(url, `n${seen.size + 1}`);
  return seen.get(url);
}

function chip(url, extra) {
  if (!url) return h("span", { class: "chip none" }, "none");
  const name = label(url);
  return h("span", { class: `chip c${(Number(name.slice(1)) - 1) % 6}`, title: url }, name, extra ? ` ${extra}` : "");
}

export function clusterView({ session, body }) {
  const nodes = h("div");
  const map = h("div");
  const local = h("div");
  const heading = h("p", { class: "muted" });
  replace(body, h("h1", {}, "Cluster"), heading, section("Nodes", nodes), section("Partition map", map), section("This node's replicas", local));
  session.every(2000, async (signal) => {
    const meta = await metadata(signal);
    const alive = new Set(meta.nodes.map((n) => n.url));
    [...meta.nodes.map((n) => n.url)].sort().forEach(label);
    heading.textContent = `Answered by ${meta.node} · group generation ${meta.generation} · ${meta.ready ? "ready" : "not ready"} · ${meta.tables.length} tables`;
    replace(nodes, nodeTable(meta, alive));
    replace(map, partitionMap(meta));
    replace(local, localTable(meta));
  });
}

function nodeTable(meta, alive) {
  const byUrl = new Map(meta.nodes.map((n) => [n.url, n]));
  const rows = [...seen.keys()].map((url) => {
    const n = byUrl.get(url);
    const up = alive.has(url);
    const maxLag = n ? Math.max(0, ...Object.values(n.lags)) : null;
    return h(
      "tr",
      { class: up ? "" : "gone", "data-node": url },
      h("td", {}, chip(url)),
      h("td", {}, h("a", { href: `${url}/ui/` }, url), url === meta.node ? h("span", { class: "tag" }, "this node") : ""),
      h("td", {}, up ? h("span", { class: "ok" }, "alive") : h("span", { class: "bad" }, "left the group")),
      h("td", {}, up ? String(meta.generation) : "–"),
      h("td", { class: "n" }, n ? String(n.active.length) : "–"),
      h("td", { class: "n" }, n ? String(n.standby.length) : "–"),
      h("td", { class: "n" }, n ? String(n.warming.length) : "–"),
      h("td", { class: "n" }, n ? num(maxLag) : "–"),
    );
  });
  for (const r of meta.refused || []) {
    rows.push(h("tr", { class: "gone" }, h("td", {}, "–"), h("td", {}, r.url), h("td", {}, h("span", { class: "bad" }, "refused: its URL is taken")), h("td", {}, "–"), h("td"), h("td"), h("td"), h("td")));
  }
  return table(["", "URL", "state", "generation", "active", "standby", "warming", "max lag"], rows, "nodes");
}

function partitionMap(meta) {
  // The lags the nodes reported at the last rebalance, and this node's own, as of now.
  const lagOf = replicaLags(meta);
  const parts = new Map();
  for (const p of meta.partitions) {
    if (!parts.has(p.table)) parts.set(p.table, []);
    parts.get(p.table).push(p);
  }
  if (!parts.size) return h("p", { class: "muted" }, "No table has partitions assigned yet.");
  // A global table: every node holds every partition and answers every key from its own
  // copy, so its other holders are not standbys waiting to take over.
  const everywhere = new Set(meta.tables.filter((t) => t.kind === "global").map((t) => t.name));
  const width = Math.max(...[...parts.values()].map((ps) => ps.length));
  const heads = ["table"];
  for (let i = 0; i < width; i++) heads.push(`p${i}`);
  const rows = [...parts.entries()].sort().map(([name, ps]) =>
    h(
      "tr",
      {},
      h("th", {}, link(`/ui/tables/${encodeURIComponent(name)}`, name), everywhere.has(name) ? h("span", { class: "tag" }, "global") : ""),
      ps
        .sort((a, b) => a.partition - b.partition)
        .map((p) =>
          h(
            "td",
            { class: "cell", "data-table": name, "data-partition": p.partition },
            h("div", {}, chip(p.active, lagText(lagOf(p, p.active)))),
            p.standbys.map((s) => {
              const [kind, word] = everywhere.has(name) ? ["global", "holds "] : ["standby", "standby "];
              return h("div", { class: kind }, word, chip(s, lagText(lagOf(p, s))));
            }),
            p.warming.map((w) => h("div", { class: "warming" }, "warming ", chip(w, lagText(lagOf(p, w))))),
          ),
        ),
    ),
  );
  const legend = h("p", { class: "muted" }, "Each cell: the active node, then standbys (for a global table: the other nodes, which answer from their own copy) and warming nodes, each with its lag in offsets behind the changelog end (this node's own replicas: now; the others': as they reported it at the last rebalance). ", [...seen.keys()].map((u) => [chip(u), ` ${hostOf(u)} `]));
  return [table(heads, rows, "map"), legend];
}

function lagText(lag) {
  return lag === undefined ? "" : `lag ${num(lag)}`;
}

function localTable(meta) {
  const rows = meta.local.map((r) =>
    h(
      "tr",
      {},
      h("td", {}, r.table),
      h("td", { class: "n" }, String(r.partition)),
      h("td", {}, h("span", { class: `state ${r.state}` }, r.state)),
      h("td", { class: "n" }, num(r.position)),
      h("td", { class: "n" }, num(r.end)),
      h("td", { class: "n" }, num(r.lag)),
      h("td", {}, r.fault || ""),
    ),
  );
  return table(["table", "partition", "state", "applied offset", "changelog end", "lag", "fault"], rows, "local");
}
