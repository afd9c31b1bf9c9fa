// Reads the node's public API with the caller's credentials.
//
// The credentials (a bearer token or an API key) live in sessionStorage only: gone when the
// tab closes, never in a URL, sent as a header to this node alone.

const STORE = "sparkiq.console.credential";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function credential() {
  try {
    return JSON.parse(sessionStorage.getItem(STORE) || "null");
  } catch {
    return null;
  }
}

export function setCredential(kind, value) {
  if (value) sessionStorage.setItem(STORE, JSON.stringify({ kind, value }));
  else sessionStorage.removeItem(STORE);
}

function headers() {
  const c = credential();
  if (!c) return {};
  return c.kind === "apikey" ? { "x-api-key": c.value } : { authorization: `Bearer ${c.value}` };
}

// GET `path` (with `params`) as JSON; an ApiError for any answer but 200.
export async function get(path, params = {}, signal) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== null && v !== undefined && v !== "") query.set(k, v);
  }
  const qs = query.toString();
  let response;
  try {
    response = await fetch(qs ? `${path}?${qs}` : path, { headers: headers(), signal });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "unreachable", `the node did not answer (${err.message})`);
  }
  const text = await response.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (response.status !== 200) {
    const error = body && body.error ? body.error : { code: "http_" + response.status, message: text };
    throw new ApiError(response.status, error.code, error.message);
  }
  return body;
}

// Path segments as the API takes them (a "/" inside a key is %2F).
export function segment(text) {
  return encodeURIComponent(text);
}

// GET /v1/metadata (with `params`, e.g. { peers: "true" }), with every list the views read
// present (empty when a node leaves one out).
export async function metadata(signal, params = {}) {
  const meta = await get("/v1/metadata", params, signal);
  for (const name of ["nodes", "partitions", "local", "tables", "refused"]) {
    if (!Array.isArray(meta[name])) meta[name] = [];
  }
  return meta;
}
