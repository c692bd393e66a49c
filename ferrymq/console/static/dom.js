// Small DOM helpers: elements, tables, toasts, confirmation dialogs, busy buttons.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") el.className = value;
    else if (name.startsWith("on") && typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(name, value === true ? "" : value);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// columns: [{label, value: row => node|text, num: bool, title}]
export function table(columns, rows, { empty = "Nothing to show.", rowAttrs = () => ({}), testid } = {}) {
  if (!rows.length) return h("p", { class: "empty" }, empty);
  return h("div", { class: "table-wrap" },
    h("table", { "data-testid": testid },
      h("thead", {}, h("tr", {}, columns.map(c => h("th", { class: c.num ? "num" : null, title: c.title }, c.label)))),
      h("tbody", {}, rows.map(r => h("tr", rowAttrs(r), columns.map(c =>
        h("td", { class: c.num ? "num" : null, dataset: c.key ? { col: c.key } : undefined }, c.value(r))))))));
}

export function card(title, ...children) {
  return h("section", { class: "card" }, title ? h("h2", {}, title) : null, ...children);
}

export function toast(message, kind = "info") {
  const el = h("div", { class: `toast ${kind}`, role: kind === "error" ? "alert" : "status" }, message);
  document.getElementById("toasts").append(el);
  setTimeout(() => el.remove(), kind === "error" ? 9000 : 4000);
}

// A modal dialog; resolves with the form's values (object) or null when cancelled.
export function dialog(title, body, { confirm = "OK", danger = false } = {}) {
  const dlg = document.getElementById("dialog");
  const form = document.getElementById("dialog-form");
  clear(form,
    h("h2", {}, title),
    h("div", { class: "dialog-body" }, body),
    h("menu", {},
      h("button", { value: "cancel", type: "submit", formnovalidate: true, class: "secondary" }, "Cancel"),
      h("button", { value: "ok", type: "submit", class: danger ? "danger" : "primary", "data-testid": "dialog-ok" }, confirm)));
  return new Promise(resolve => {
    dlg.addEventListener("close", () => {
      if (dlg.returnValue !== "ok") return resolve(null);
      resolve(Object.fromEntries(new FormData(form).entries()));
    }, { once: true });
    dlg.returnValue = "";
    dlg.showModal();
  });
}

// Runs fn with the button disabled and a spinner; errors become a toast.
export async function busy(button, fn) {
  const label = button.textContent;
  button.disabled = true;
  button.classList.add("busy");
  try {
    return await fn();
  } catch (e) {
    toast(e.message, "error");
    return undefined;
  } finally {
    button.disabled = false;
    button.classList.remove("busy");
    button.textContent = label;
  }
}

export function field(label, input, hint) {
  return h("label", { class: "field" }, h("span", {}, label), input, hint ? h("small", {}, hint) : null);
}

export function spinner(text = "Loading…") {
  return h("p", { class: "loading" }, h("span", { class: "spin", "aria-hidden": "true" }), text);
}

// The JSON behind a page, for scripts (what the CLI's --json gives).
export function jsonLink(path) {
  return h("a", { class: "json-link", href: path, target: "_blank", rel: "noopener", title: "this page's data as JSON (the console's API)" }, "{ } JSON");
}
