// One table: browse by prefix or key range, a page at a time, forward and back.

import { get, segment } from "./api.js";
import { compactJson, h, link, replace, table, time } from "./dom.js";

const trails = new Map(); // a browse (table and filters) -> the cursors of the pages before

export function browseView({ session, body, args, query, navigate }) {
  const [name] = args;
  const filters = {
    prefix: query.get("prefix") || "",
    from: query.get("from") || "",
    to: query.get("to") || "",
    limit: query.get("limit") || "20",
  };
  const cursor = query.get("cursor") || "";
  const trailKey = JSON.stringify([name, filters]);
  const trail = trails.get(trailKey) || [];
  trails.set(trailKey, trail);
  const base = `/ui/tables/${encodeURIComponent(name)}`;
  const href = (c) => {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(filters)) if (v && !(k === "limit" && v === "20")) q.set(k, v);
    if (c) q.set("cursor", c);
    const s = q.toString();
    return s ? `${base}?${s}` : base;
  };

  const input = (field, placeholder) => h("input", { name: field, value: filters[field], placeholder, "aria-label": field });
  const limit = h("select", { name: "limit", "aria-label": "page size" }, ["10", "20", "50", "100"].map((n) => h("option", { value: n, selected: n === filters.limit }, n)));
  const form = h(
    "form",
    {
      class: "filters",
      onsubmit: (event) => {
        event.preventDefault();
        const data = new FormData(form);
        const q = new URLSearchParams();
        for (const k of ["prefix", "from", "to", "limit"]) if (data.get(k)) q.set(k, data.get(k));
        navigate(`${base}?${q}`);
      },
    },
    h("label", {}, "prefix ", input("prefix", "e.g. C00")),
    h("label", {}, "from ", input("from", "first key")),
    h("label", {}, "to ", input("to", "last key")),
    h("label", {}, "per page ", limit),
    h("button", {}, "Browse"),
  );
  const keyBox = h("input", { name: "key", placeholder: "a key", "aria-label": "key to look up" });
  const lookup = h(
    "form",
    {
      class: "lookup",
      onsubmit: (event) => {
        event.preventDefault();
        if (keyBox.value !== "") navigate(`${base}/keys/${segment(keyBox.value)}`);
      },
    },
    h("label", {}, "Look a key up ", keyBox),
    h("button", {}, "Go"),
  );
  const pageInfo = h("span", { class: "muted page-info" });
  const prev = h("button", { class: "prev", disabled: !cursor, onclick: () => navigate(href(trail.pop() || "")) }, "← Previous");
  const next = h("button", { class: "next", disabled: true }, "Next →");
  const results = h("div");
  const info = h("p", { class: "muted" });
  replace(body, h("h1", {}, "Table ", h("code", {}, name)), info, lookup, form, h("div", { class: "pager" }, prev, next, pageInfo), results);
  if (!cursor) trail.length = 0;

  let nextCursor = null;
  next.addEventListener("click", () => {
    if (!nextCursor) return;
    trail.push(cursor);
    navigate(href(nextCursor));
  });

  session.every(5000, async (signal) => {
    const [summary, page] = await Promise.all([
      get("/v1/tables", {}, signal).then((d) => d.tables.find((t) => t.name === name)),
      get(`/v1/tables/${segment(name)}/range`, { ...filters, cursor }, signal),
    ]);
    const windowed = summary && summary.kind === "windowed";
    if (summary) info.textContent = `${summary.kind} table on topic ${summary.topic}, ${summary.partitions} partitions, keys ${summary.key_format}, values ${summary.value_format}`;
    nextCursor = page.next_cursor;
    next.disabled = !nextCursor;
    pageInfo.textContent = `page ${trail.length + 1} · ${page.items.length} items${page.standby ? " · read from a standby" : ""}`;
    const heads = windowed ? ["key", "window start", "window end", "value"] : ["key", "value"];
    const rows = page.items.map((item) => {
      const keyText = typeof item.key === "string" ? item.key : JSON.stringify(item.key);
      return h(
        "tr",
        {},
        h("td", {}, link(`${base}/keys/${segment(keyText)}`, keyText)),
        windowed ? [h("td", {}, time(item.start)), h("td", {}, time(item.end))] : [],
        h("td", { class: "value" }, compactJson(item.value)),
      );
    });
    replace(results, page.items.length ? table(heads, rows, "items") : h("p", { class: "muted" }, "No keys here."));
  });
}
