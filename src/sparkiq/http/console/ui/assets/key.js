// One key: its value, where it was read, the curl command; for a windowed table, a chart of
// the key's windows over time.

import { ApiError, credential, get, segment } from "./api.js";
import { h, keyValues, link, num, replace, section, table, time } from "./dom.js";
import { TimeChart } from "./charts.js";

// The windows the chart shows by default: the last hour of window starts.
const CHART_SPAN_MS = 60 * 60 * 1000;

export function keyView({ session, body, args }) {
  const [name, key] = args;
  const facts = h("div");
  const value = h("pre", { class: "json" });
  const curl = h("pre", { class: "curl" });
  const chartBox = h("div", { class: "chart-box" });
  const windows = h("div");
  const valueSection = section("Value", value);
  const windowsSection = section("Windows", chartBox, windows);
  windowsSection.hidden = true;
  replace(
    body,
    h("p", {}, link(`/ui/tables/${encodeURIComponent(name)}`, `← table ${name}`)),
    h("h1", {}, h("code", {}, key)),
    facts,
    valueSection,
    windowsSection,
    section("The same from a shell", curl),
  );
  let chart = null;
  let series = null;
  session.onEnd(() => chart && chart.destroy());

  session.every(2000, async (signal) => {
    const summary = (await get("/v1/tables", {}, signal)).tables.find((t) => t.name === name);
    const windowed = summary && summary.kind === "windowed";
    const path = `/v1/tables/${segment(name)}/keys/${segment(key)}${windowed ? "/windows" : ""}`;
    let params = windowed ? { from: Date.now() - CHART_SPAN_MS } : {};
    let answer;
    try {
      answer = await get(path, params, signal);
      if (windowed && !answer.items.length) {
        // Nothing in the last hour: the key's earliest windows instead.
        params = {};
        answer = await get(path, params, signal);
      }
    } catch (err) {
      if (err instanceof ApiError && err.status === 404 && err.code === "not_found") {
        replace(facts, h("p", { class: "absent" }, `Absent: ${err.message}`));
        value.textContent = "";
        curl.textContent = curlCommand(path, params);
        return;
      }
      throw err;
    }
    curl.textContent = curlCommand(path, params);
    replace(
      facts,
      keyValues([
        ["table", link(`/ui/tables/${encodeURIComponent(name)}`, name)],
        ["partition", String(answer.partition)],
        ["answered by", answer.node],
        ["offset", num(answer.offset)],
        ["standby", answer.standby ? "yes (a standby answered)" : "no (the active answered)"],
        ["token", h("code", {}, answer.token || "")],
      ]),
    );
    if (!windowed) {
      value.textContent = JSON.stringify(answer.value, null, 2);
      return;
    }
    valueSection.hidden = true;
    windowsSection.hidden = false;
    const items = answer.items;
    const fields = numericFields(items);
    if (!chart || String(fields) !== String(series)) {
      if (chart) chart.destroy();
      series = fields;
      replace(chartBox);
      const what = summary.window_size_ms ? `windows of ${summary.window_size_ms / 1000} s` : "sessions"; // sessions have no fixed length
      chart = new TimeChart(chartBox, `${key}: ${what}, by start`, fields.length ? fields : ["value"], { bars: true, twoScales: true, step: summary.window_size_ms || 0 });
    }
    chart.update(
      items.map((w) => w.start),
      (fields.length ? fields : ["value"]).map((f) => items.map((w) => pick(w.value, f))),
    );
    const recent = items.slice(-20).reverse();
    const since = params.from ? `since ${time(params.from)}` : "(the earliest kept)";
    replace(windows, h("p", { class: "muted" }, `${items.length} windows ${since}; the latest ${recent.length}:`), table(["start", "end", "value"], recent.map((w) => h("tr", {}, h("td", {}, time(w.start)), h("td", {}, time(w.end)), h("td", { class: "value" }, JSON.stringify(w.value)))), "items"));
  });
}

// The numeric fields of the windows' values (a number itself: "value").
function numericFields(items) {
  const fields = new Set();
  for (const w of items) {
    if (typeof w.value === "number") fields.add("value");
    else if (w.value && typeof w.value === "object") {
      for (const [k, v] of Object.entries(w.value)) if (typeof v === "number") fields.add(k);
    }
  }
  return [...fields];
}

function pick(value, field) {
  if (field === "value" && typeof value === "number") return value;
  return value && typeof value[field] === "number" ? value[field] : null;
}

function curlCommand(path, params) {
  const q = new URLSearchParams(params).toString();
  const url = `${location.origin}${path}${q ? "?" + q : ""}`;
  const c = credential();
  const auth = !c ? "" : c.kind === "apikey" ? ` -H "x-api-key: $SPARKIQ_API_KEY"` : ` -H "authorization: Bearer $SPARKIQ_TOKEN"`;
  return `curl -s${auth} '${url}'`;
}
