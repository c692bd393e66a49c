// The console's shell: cluster choice, read-only badge, and hash routing to the pages
// (#/overview, #/topics, #/groups, #/messages, with their state in the query string).

import * as api from "./api.js";
import { clear, h } from "./dom.js";
import * as overview from "./pages/overview.js";
import * as topics from "./pages/topics.js";
import * as groups from "./pages/groups.js";
import * as messages from "./pages/messages.js";

const PAGES = { overview, topics, groups, messages };
const state = { config: null, cleanup: null, renderId: 0 };

function parseHash() {
  const [path, search = ""] = location.hash.replace(/^#\/?/, "").split("?");
  return { page: PAGES[path] ? path : "overview", params: Object.fromEntries(new URLSearchParams(search)) };
}

export function navigate(page, params = {}) {
  const cluster = document.getElementById("cluster").value;
  const q = new URLSearchParams({ cluster, ...params });
  for (const [k, v] of [...q.entries()]) if (v === "" || v === "undefined") q.delete(k);
  location.hash = `#/${page}?${q}`;
}

async function show() {
  const { page, params } = parseHash();
  const select = document.getElementById("cluster");
  if (params.cluster && [...select.options].some(o => o.value === params.cluster)) select.value = params.cluster;
  for (const a of document.querySelectorAll(".tabs a")) a.classList.toggle("active", a.dataset.page === page);
  if (state.cleanup) { state.cleanup(); state.cleanup = null; }
  const root = clear(document.getElementById("page"));
  const id = ++state.renderId;
  const ctx = {
    root, params, cluster: select.value, readOnly: readOnly(state.config), config: state.config,
    navigate: (p, extra) => navigate(p, extra),
    current: () => id === state.renderId,
  };
  document.title = `${page[0].toUpperCase()}${page.slice(1)} · ${ctx.cluster} · FerryMQ console`;
  try {
    state.cleanup = (await PAGES[page].render(ctx)) || null;
  } catch (e) {
    if (ctx.current()) root.append(h("p", { class: "error-box", role: "alert" }, e.message));
  }
}

// A viewer's console is read-only for its pages (the server refuses their writes anyway).
const readOnly = config => config.readOnly || config.user?.role === "viewer";

function showUser(user) {
  const box = document.getElementById("user");
  if (!user) return;
  box.hidden = false;
  box.append(h("span", { class: "user-name", "data-testid": "user", title: user.viewBodies ? "may read message bodies" : "message bodies hidden" },
               `${user.name} · ${user.role}`),
             h("button", { class: "refresh", "data-testid": "sign-out", onclick: () => api.signOut() }, "Sign out"));
}

async function start() {
  state.config = await api.get("/api/config");
  api.setCsrfToken(state.config.csrfToken);
  const select = document.getElementById("cluster");
  for (const c of state.config.clusters) select.append(h("option", { value: c.name, title: c.namesrv }, c.name));
  select.addEventListener("change", () => navigate(parseHash().page));
  const mode = document.getElementById("mode");
  const ro = readOnly(state.config);
  mode.textContent = ro ? "read-only" : "read-write";
  mode.classList.add(ro ? "ro" : "rw");
  mode.title = state.config.readOnly ? "Write actions are off (--read-only)"
    : ro ? "Your role (viewer) may not change anything" : "Write actions are on";
  document.body.classList.toggle("read-only", ro);
  showUser(state.config.user);
  window.addEventListener("hashchange", show);
  document.getElementById("refresh").addEventListener("click", show);
  await show();
}

start().catch(e => {
  document.getElementById("page").append(h("p", { class: "error-box", role: "alert" }, `The console API does not answer: ${e.message}`));
});
