// The pipeline: every streaming query `sparkiq run` runs, its latest micro-batch and small
// charts of its recent ones. A query in Spark's Real-Time Mode reports an epoch per "batch":
// its length is planned (how often offsets are checkpointed), not a processing time, since
// each record passes through as it arrives; its card shows the epoch as such and the time
// between epochs, when arriving records wait, instead of a batch duration.

import { get } from "./api.js";
import { h, keyValues, num, replace, time } from "./dom.js";
import { TimeChart } from "./charts.js";

const KEEP_MS = 10 * 60 * 1000; // what the charts show

export function pipelineView({ session, body }) {
  const list = h("div", { class: "queries" });
  const info = h("p", { class: "muted" });
  replace(body, h("h1", {}, "Pipeline"), info, list);
  const queries = new Map(); // name -> {history, card, facts, charts}
  let since = null;
  session.onEnd(() => queries.forEach((q) => q.charts.forEach((c) => c.destroy())));

  session.every(2000, async (signal) => {
    const doc = await get("/v1/pipeline", since === null ? {} : { since_ms: since }, signal);
    if (!doc.queries.length && !queries.size) {
      info.textContent = "No pipeline has published its progress to this cluster yet: run one with `sparkiq run PIPELINE.py` (its queries appear here after their first micro-batch).";
      return;
    }
    const now = doc.time_ms;
    for (const q of doc.queries) {
      let entry = queries.get(q.name);
      if (entry && entry.realtime !== isRealtime(q.latest)) {
        // The query runs in the other mode now (Spark refused Real-Time Mode): a new card.
        entry.charts.forEach((c) => c.destroy());
        entry.card.remove();
        entry = null;
      }
      if (!entry) {
        entry = card(q);
        queries.set(q.name, entry);
        list.append(entry.card);
        entry.charts = [
          new TimeChart(entry.rates, "rows per second", ["input", "processed"]),
          entry.realtime
            ? new TimeChart(entry.durations, "time between epochs", ["ms"], { unit: " ms" })
            : new TimeChart(entry.durations, "batch duration", ["seconds"], { unit: " s" }),
          new TimeChart(entry.state, "state rows and dead letters", ["state rows", "dead letters (total)"], { twoScales: true }),
        ];
      }
      const last = entry.history.length ? entry.history[entry.history.length - 1] : null;
      for (const b of q.history) {
        if (last && b.batch < last.batch && b.time_ms >= last.time_ms) entry.history.length = 0; // a new run
        if (!entry.history.length || b.time_ms > entry.history[entry.history.length - 1].time_ms) entry.history.push(b);
      }
      entry.history = entry.history.filter((b) => b.time_ms > now - KEEP_MS);
      since = Math.max(since || 0, ...q.history.map((b) => b.time_ms));
      show(entry, q, now);
    }
    info.textContent = `${queries.size} ${queries.size === 1 ? "query" : "queries"}, as ${doc.node} heard of them; charts: the last ${KEEP_MS / 60000} minutes.`;
  });
}

// Whether a batch is a Real-Time epoch (figures from an older pipeline carry no trigger).
export function isRealtime(b) {
  return b.trigger === "realtime";
}

function card(q) {
  const entry = {
    realtime: isRealtime(q.latest),
    history: [],
    facts: h("div"),
    rates: h("div"),
    durations: h("div"),
    state: h("div"),
  };
  entry.card = h(
    "section",
    { class: "query", "data-query": q.name },
    h(
      "h2",
      {},
      q.name,
      h("span", { class: "muted" }, q.tables.length ? ` writes ${q.tables.join(", ")}` : " writes topics only"),
      entry.realtime && h("span", { class: "mode" }, "real-time"),
    ),
    entry.facts,
    h("div", { class: "charts" }, entry.rates, entry.durations, entry.state),
  );
  return entry;
}

function show(entry, q, now) {
  const b = q.latest;
  const age = Math.max(0, Math.round((now - b.time_ms) / 1000));
  const ms = (v) => (v === null || v === undefined ? "–" : `${num(v)} ms`);
  const dead = ["dead letters", `${num(b.dead_letters_total)} since start (${num(b.dead_letters)} in this ${entry.realtime ? "epoch" : "batch"})`];
  const state = ["state rows", b.state_rows === null ? "stateless" : num(b.state_rows)];
  replace(
    entry.facts,
    keyValues(
      entry.realtime
        ? [
            ["mode", "real-time: each record is processed as it arrives; offsets are checkpointed and progress reported once per epoch"],
            ["epoch", `${b.batch} (ended ${age} s ago, ${time(b.time_ms)})`],
            ["input", `${num(b.input_rows)} rows, ${num(b.input_rows_per_s)} rows/s`],
            ["epoch length", `${ms(b.batch_ms)} (planned: not a processing time)`],
            ["between epochs", `${ms(b.between_epochs_ms)} (records that arrive then wait for the next epoch)`],
            ["record latency", "not reported by Spark in Real-Time Mode"],
            state,
            dead,
          ]
        : [
            ["batch", `${b.batch} (${age} s ago, ${time(b.time_ms)})`],
            ["input", `${num(b.input_rows)} rows, ${num(b.input_rows_per_s)} rows/s`],
            ["processed", `${num(b.processed_rows_per_s)} rows/s`],
            ["batch duration", ms(b.batch_ms)],
            state,
            dead,
          ],
    ),
  );
  const xs = entry.history.map((x) => x.time_ms);
  entry.charts[0].update(xs, [entry.history.map((x) => x.input_rows_per_s), entry.history.map((x) => x.processed_rows_per_s)]);
  entry.charts[1].update(
    xs,
    entry.realtime
      ? [entry.history.map((x) => (x.between_epochs_ms === null || x.between_epochs_ms === undefined ? null : x.between_epochs_ms))]
      : [entry.history.map((x) => (x.batch_ms === null ? null : x.batch_ms / 1000))],
  );
  entry.charts[2].update(xs, [entry.history.map((x) => x.state_rows), entry.history.map((x) => x.dead_letters_total)]);
}
