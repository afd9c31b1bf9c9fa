// The console's shell: routes each /ui/... URL to its view, follows links without
// reloading, refreshes the view while it is shown, and asks for credentials on a 401.

import { ApiError, credential, get, setCredential } from "./api.js";
import { clock, h, replace } from "./dom.js";
import { clusterView } from "./cluster.js";
import { tablesView } from "./tables.js";
import { browseView } from "./browse.js";
import { keyView } from "./key.js";
import { pipelineView } from "./pipeline.js";

const ROUTES = [
  [/^\/ui\/?$/, clusterView, "cluster"],
  [/^\/ui\/tables\/?$/, tablesView, "tables"],
  [/^\/ui\/tables\/([^/]+)\/?$/, browseView, "tables"],
  [/^\/ui\/tables\/([^/]+)\/keys\/([^/]+)\/?$/, keyView, "tables"],
  [/^\/ui\/pipeline\/?$/, pipelineView, "pipeline"],
];

const main = document.getElementById("main");
const status = document.getElementById("status");
const signout = document.getElementById("signout");
let session = null; // the view shown now: its timers stop when another is shown

class Session {
  constructor() {
    this.controller = new AbortController();
    this.timers = [];
    this.cleanups = [];
    this.banner = h("div", { class: "banner", role: "alert", hidden: true });
  }

  get signal() {
    return this.controller.signal;
  }

  get live() {
    return !this.controller.signal.aborted;
  }

  // Run `fn` now and every `ms` while this view is shown (not while the tab is hidden).
  every(ms, fn) {
    const tick = async () => {
      if (!this.live) return;
      if (!document.hidden) await this.run(fn);
      if (this.live) this.timers.push(setTimeout(tick, ms));
    };
    return tick();
  }

  // Run `fn` once, showing what goes wrong in the view's banner (a 401 asks to sign in).
  async run(fn) {
    try {
      await fn(this.signal);
      if (!this.live) return;
      this.banner.hidden = true;
      status.textContent = `updated ${clock(Date.now())}`;
    } catch (err) {
      if (!this.live || err.name === "AbortError") return;
      if (err instanceof ApiError && err.status === 401) {
        showSignIn(err.message);
        return;
      }
      this.banner.hidden = false;
      this.banner.textContent = describe(err);
      status.textContent = `failed ${clock(Date.now())}`;
    }
  }

  onEnd(fn) {
    this.cleanups.push(fn);
  }

  end() {
    this.controller.abort();
    this.timers.forEach(clearTimeout);
    this.cleanups.forEach((fn) => fn());
  }
}

export function describe(err) {
  if (err instanceof ApiError) {
    if (err.status === 403) return `403 forbidden: ${err.message}`;
    if (err.status === 0) return err.message;
    return `${err.status} ${err.code}: ${err.message}`;
  }
  return `error: ${err.message || err}`;
}

function newSession() {
  if (session) session.end();
  session = new Session();
  return session;
}

export function navigate(href, replaceState = false) {
  if (replaceState) history.replaceState(null, "", href);
  else history.pushState(null, "", href);
  route();
}

function route() {
  const s = newSession();
  const path = location.pathname;
  signout.hidden = !credential();
  for (const [pattern, view, section] of ROUTES) {
    const match = pattern.exec(path);
    if (!match) continue;
    markSection(section);
    let args;
    try {
      args = match.slice(1).map(decodeURIComponent);
    } catch {
      break;
    }
    const body = h("div", { class: "view" });
    replace(main, s.banner, body);
    view({ session: s, body, args, query: new URLSearchParams(location.search), navigate, offerTables });
    return;
  }
  markSection(null);
  replace(main, h("h1", {}, "Not a console page"), h("p", {}, "Try ", h("a", { href: "/ui/", "data-nav": true }, "the cluster"), "."));
}

function markSection(section) {
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("current", a.dataset.section === section);
  }
}

function showSignIn(message) {
  const s = newSession();
  markSection(null);
  const had = credential();
  const kind = h(
    "select",
    { name: "kind", "aria-label": "credential kind" },
    h("option", { value: "bearer" }, "Bearer token"),
    h("option", { value: "apikey" }, "API key"),
  );
  const value = h("input", { name: "credential", type: "password", autocomplete: "off", required: true, "aria-label": "credential" });
  const form = h(
    "form",
    {
      class: "signin",
      onsubmit: (event) => {
        event.preventDefault();
        setCredential(kind.value, value.value.trim());
        route();
      },
    },
    h("h1", {}, had ? "The node refused these credentials" : "This node asks who you are"),
    h("p", { class: "error" }, `401: ${message}`),
    h(
      "p",
      { class: "muted" },
      "Give a bearer token (a JWT) or an API key. It is kept in this tab's session storage only and sent as a header to this node.",
    ),
    h("label", {}, "Kind ", kind),
    h("label", {}, "Credential ", value),
    h("button", { type: "submit" }, "Sign in"),
  );
  replace(main, form);
  status.textContent = "";
  signout.hidden = !had;
  value.focus();
  return s;
}

document.addEventListener("click", (event) => {
  const a = event.target.closest("a[data-nav]");
  if (!a || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin) return;
  event.preventDefault();
  navigate(url.pathname + url.search);
});

window.addEventListener("popstate", route);

signout.addEventListener("click", () => {
  setCredential(null, null);
  route();
});

// The key search in the header: table and key -> that key's page.
const searchForm = document.getElementById("search");
const searchTable = document.getElementById("search-table");
const searchKey = document.getElementById("search-key");
searchForm.addEventListener("submit", (event) => {
  event.preventDefault();
  const key = searchKey.value;
  if (!searchTable.value || key === "") return;
  navigate(`/ui/tables/${encodeURIComponent(searchTable.value)}/keys/${encodeURIComponent(key)}`);
});

// The tables the header's search offers (views that read /v1/tables refresh it too: each
// view is handed this function, so no view imports this module).
function offerTables(names) {
  const current = [...searchTable.options].map((o) => o.value).join("\n");
  if (current === names.join("\n")) return;
  const chosen = searchTable.value;
  replace(searchTable, names.map((n) => h("option", { value: n, selected: n === chosen }, n)));
}

get("/v1/tables")
  .then((doc) => offerTables(doc.tables.map((t) => t.name)))
  .catch(() => {}); // a 401 here is the view's to show

route();
