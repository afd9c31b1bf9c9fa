// Small helpers to build the page: elements from data (never HTML from data), formatting.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "text") el.textContent = value;
    else if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// A link inside the console: followed without reloading the page (app.js).
export function link(href, text, cls) {
  return h("a", { href, "data-nav": true, class: cls }, text);
}

export function table(headings, rows, cls) {
  return h(
    "table",
    { class: cls },
    h("thead", {}, h("tr", {}, headings.map((t) => h("th", {}, t)))),
    h("tbody", {}, rows),
  );
}

export function section(title, ...children) {
  return h("section", {}, h("h2", {}, title), ...children);
}

export function keyValues(pairs) {
  return h(
    "dl",
    { class: "facts" },
    pairs.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
  );
}

export function num(n) {
  if (n === null || n === undefined) return "–";
  return typeof n === "number" ? n.toLocaleString("en-US", { maximumFractionDigits: 1 }) : String(n);
}

export function time(ms) {
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function clock(ms) {
  return new Date(ms).toLocaleTimeString("en-GB", { hour12: false });
}

// The part of a node URL worth showing (host:port).
export function hostOf(url) {
  try {
    return new URL(url).host;
  } catch {
    return String(url);
  }
}

export function compactJson(value, limit = 160) {
  const text = JSON.stringify(value);
  return text.length > limit ? text.slice(0, limit - 1) + "…" : text;
}

export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
}
