// The console's JSON API: every call returns parsed JSON or throws an Error whose message
// is the server's {"error": "..."} text.

async function request(method, path, body) {
  const init = { method, headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  let data = null;
  try { data = await response.json(); } catch { /* not JSON */ }
  if (!response.ok) {
    throw new Error((data && data.error) || `${response.status} ${response.statusText}`);
  }
  return data;
}

export const get = path => request("GET", path);
export const post = (path, body) => request("POST", path, body ?? {});
export const del = path => request("DELETE", path);

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : "";
}

export const cluster = name => `/api/clusters/${encodeURIComponent(name)}`;
export const enc = encodeURIComponent;
