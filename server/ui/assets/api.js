// The decision API as the console uses it. Every request is same-origin, so the
// gatectl_token cookie rides along; a 401 opens the token dialog.
export class HTTPError extends Error {
  constructor(status, body) {
    super(body?.error?.message || `HTTP ${status}`);
    this.status = status;
    this.field = body?.error?.field || "";
  }
}

let onUnauthorized = () => {};
export function setUnauthorizedHandler(f) {
  onUnauthorized = f;
}

export async function api(method, path, body) {
  const init = { method, headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  const text = await r.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { raw: text };
  }
  if (r.status === 401) onUnauthorized();
  if (!r.ok) throw new HTTPError(r.status, data);
  return data;
}

export const get = (p) => api("GET", p);
export const put = (p, b) => api("PUT", p, b);
export const post = (p, b) => api("POST", p, b);

// metrics reads /metrics (Prometheus text) into [{name, labels, value}] for the
// given metric names.
export async function metrics(names) {
  const r = await fetch("/metrics");
  if (!r.ok) throw new HTTPError(r.status, null);
  const out = [];
  for (const line of (await r.text()).split("\n")) {
    if (!line || line[0] === "#") continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)/.exec(line);
    if (!m || !names.includes(m[1])) continue;
    const labels = {};
    for (const kv of (m[3] || "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[kv[1]] = kv[2];
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}
