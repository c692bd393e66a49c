// The console's JSON API: every call returns parsed JSON or throws an Error whose message
// is the server's {"error": "..."} text. With sign-in on, write calls carry the session's CSRF
// token, and a 401 (the session ended) goes back to the sign-in page.

let csrfToken = null;
let leaving = false;
export function setCsrfToken(token) { csrfToken = token; }

function signInAgain() {
  if (leaving) return;
  leaving = true;
  location.assign("/signin?m=expired");
}

async function request(method, path, body) {
  const init = { method, headers: { Accept: "application/json" } };
  if (method !== "GET" && csrfToken) init.headers["X-CSRF-Token"] = csrfToken;
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 401) signInAgain();
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

export async function signOut() {
  leaving = true;  // the page's pending calls end in 401 now: no "session ended" on the way out
  await fetch("/auth/signout", { method: "POST", headers: { "X-CSRF-Token": csrfToken ?? "" } });
  location.assign("/signin?m=signedout");
}

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : "";
}

export const cluster = name => `/api/clusters/${encodeURIComponent(name)}`;
export const enc = encodeURIComponent;
