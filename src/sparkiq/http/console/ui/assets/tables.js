// Every table: kind, formats, partitions and freshness (applied offset vs changelog end).

import { get, metadata } from "./api.js";
import { h, hostOf, link, num, replace, table } from "./dom.js";
import { tableLag } from "./lags.js";

// Fields of a /v1/tables entry shown in their own columns; any other field (freshness
// figures a newer node adds, a description) is shown beside them.
const KNOWN = new Set(["name", "topic", "partitions", "kind", "key_format", "value_format", "partitioner", "misplaced_records", "window_size_ms", "key_schema", "value_schema"]);

export function tablesView({ session, body, offerTables }) {
  const list = h("div");
  replace(
    body,
    h("h1", {}, "Tables"),
    h("p", { class: "muted" }, "Freshness: this node's own replicas' applied offsets against the changelog end; and the table's active lag, the most any partition's active is behind the changelog end now, as each active told this node (an active that did not answer: the figure it reported at the last rebalance, and the cell says so; \"k of n partitions known\" when only k of the table's n actives' lags are known)."),
    list,
  );
  session.every(3000, async (signal) => {
    const [doc, meta] = await Promise.all([get("/v1/tables", {}, signal), metadata(signal, { peers: "true" })]);
    offerTables(doc.tables.map((t) => t.name));
    const rows = doc.tables.map((t) => row(t, meta));
    replace(list, doc.tables.length ? table(["table", "kind", "key", "value", "partitions", "partitioner", "applied / end (this node)", "active lag (max)", "more"], rows, "tables") : h("p", { class: "muted" }, "No table is registered yet (or none you may read)."));
  });
}

function row(t, meta) {
  let applied = 0;
  let end = 0;
  let held = 0;
  for (const r of meta.local) {
    if (r.table !== t.name) continue;
    applied += r.position;
    end += r.end;
    held += 1;
  }
  const lag = tableLag(meta, t.name, t.kind === "global");
  const extra = Object.entries(t).filter(([k]) => !KNOWN.has(k));
  if (t.misplaced_records) extra.unshift(["misplaced_records", t.misplaced_records]);
  const kind = t.window_layout === "kstreams-session" ? "sessions (Kafka Streams)" : t.kind === "windowed" && t.window_size_ms ? `windowed (${t.window_size_ms / 1000} s)` : t.kind;
  return h(
    "tr",
    { "data-table": t.name },
    h("td", {}, link(`/ui/tables/${encodeURIComponent(t.name)}`, t.name)),
    h("td", {}, kind),
    h("td", {}, t.key_format),
    h("td", {}, t.value_format),
    h("td", { class: "n" }, String(t.partitions)),
    h("td", {}, t.partitioner || ""),
    h("td", { class: "n" }, held ? `${num(applied)} / ${num(end)}${end > applied ? ` (${num(end - applied)} behind)` : " ✓"}` : "no replica here"),
    h("td", { class: "n" }, lagText(lag)),
    h("td", { class: "more" }, extra.map(([k, v]) => h("div", {}, `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`))),
  );
}

function lagText({ lag, known, partitions, silent }) {
  const notes = [];
  if (lag !== undefined && known < partitions) notes.push(`${known} of ${partitions} partitions known`);
  if (silent.length) notes.push(`${silent.map(hostOf).join(", ")} did not answer: ${lag === undefined ? "no figure" : "figures from the last rebalance"}`);
  const note = notes.length ? h("span", { class: "muted", title: silent.join(" ") || null }, ` (${notes.join("; ")})`) : "";
  return [lag === undefined ? "–" : num(lag), note];
}
