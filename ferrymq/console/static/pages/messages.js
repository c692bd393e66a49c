// Messages: find by key, by id, or by topic and time range (paged); a message's properties,
// body (text, pretty JSON, hex) and trace; a trace by message id; resend a dead-letter message
// to its group; export a result set as JSON lines or CSV, with progress.

import * as api from "../api.js";
import { busy, card, clear, dialog, field, h, table, toast } from "../dom.js";
import * as fmt from "../format.js";
import { traceView } from "../trace_view.js";

const MODES = [["key", "By key"], ["id", "By message id"], ["time", "By time range"], ["trace", "Trace"]];

function decodeBase64(text) {
  const raw = atob(text);
  const out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
  return out;
}

export function hexDump(bytes, limit = 4096) {
  const lines = [];
  for (let i = 0; i < Math.min(bytes.length, limit); i += 16) {
    const row = bytes.slice(i, i + 16);
    const hex = [...row].map(b => b.toString(16).padStart(2, "0")).join(" ");
    const ascii = [...row].map(b => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(`${i.toString(16).padStart(8, "0")}  ${hex.padEnd(47)}  ${ascii}`);
  }
  if (bytes.length > limit) lines.push(`… ${fmt.bytes(bytes.length - limit)} more`);
  return lines.join("\n");
}

function prettyJson(text) {
  if (text === null) return null;
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return null; }
}

function bodyView(m) {
  if (m.bodyHidden) {
    return h("p", { class: "muted", "data-testid": "message-body" }, `‹${fmt.bytes(m.bodySize)} body hidden: your account may not read message bodies›`);
  }
  const json = prettyJson(m.body);
  const views = [];
  if (json !== null) views.push(["json", "JSON"]);
  if (m.body !== null) views.push(["text", "Text"]);
  views.push(["hex", "Hex"]);
  const pre = h("pre", { class: "body", "data-testid": "message-body" });
  const show = view => {
    pre.textContent = view === "json" ? json : view === "text" ? m.body : hexDump(decodeBase64(m.bodyBase64));
    for (const b of buttons) b.classList.toggle("active", b.dataset.view === view);
  };
  const buttons = views.map(([v, l]) => h("button", { class: "chip", dataset: { view: v }, onclick: () => show(v) }, l));
  show(views[0][0]);
  return h("div", {}, h("div", { class: "chips" }, buttons, h("span", { class: "muted" }, ` ${fmt.bytes(m.bodySize)} · ${m.bodyEncoding}`)), pre);
}

// A message's OpenTelemetry trace id, a link into the trace viewer when the console has one (--trace-url).
function traceIdLink(ctx, traceId) {
  const url = ctx.config.traceUrl;
  if (!url) return h("code", {}, traceId);
  return h("a", { href: url.replace("{traceId}", encodeURIComponent(traceId)), target: "_blank", rel: "noopener noreferrer" },
           h("code", {}, traceId));
}

function detailCard(ctx, m) {
  const rows = [
    ["Topic", m.topic], ["Message id", m.msgId], ["Offset msgId", m.offsetMsgId], ["Queue", `${m.queueId} @ offset ${fmt.count(m.queueOffset)}`],
    ["Tags", m.tags ?? "–"], ["Keys", m.keys.join(" ") || "–"], ["Stored", `${fmt.time(m.storeTimestamp)} (${fmt.ago(m.storeTimestamp)})`],
    ["Born", `${fmt.time(m.bornTimestamp)} at ${m.bornHost}`], ["Store host", m.storeHost], ["Reconsume times", m.reconsumeTimes],
    ["Size on disk", fmt.bytes(m.storeSize)],
  ];
  const dead = m.deadLetter;
  return card(`Message ${m.msgId}`,
    dead ? h("div", { class: "callout warn" },
      h("p", {}, h("strong", {}, "Dead letter. "), `Group ${dead.group} gave up on it (original topic ${dead.originalTopic ?? "unknown"}).`),
      h("button", { class: "primary", disabled: ctx.readOnly, "data-testid": "resend-dlq", onclick: e => busy(e.currentTarget, async () => {
        const ok = await dialog(`Resend to ${dead.group}?`, h("p", {}, `The message goes to %RETRY%${dead.group}: only group ${dead.group} consumes it again, with a fresh retry budget.`), { confirm: "Resend" });
        if (!ok) return;
        const r = await api.post(`${api.cluster(ctx.cluster)}/messages/resend-dlq`, { offsetMsgId: m.offsetMsgId });
        toast(`Resent to ${r.topic} (queue ${r.queueId}, offset ${r.queueOffset})`, "ok");
      }) }, `Resend to ${dead.group}`)) : null,
    h("dl", { class: "kv" }, rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, String(v))]),
      m.traceId ? [h("dt", {}, "Trace id"), h("dd", { "data-testid": "trace-id" }, traceIdLink(ctx, m.traceId))] : []),
    h("h3", {}, "Properties"),
    table([{ label: "Name", value: p => h("code", {}, p[0]) }, { label: "Value", value: p => p[1] }],
      Object.entries(m.properties), { testid: "properties" }),
    h("h3", {}, "Body"), bodyView(m),
    h("h3", {}, "Trace"), traceView(ctx, m.msgId));
}

function resultsTable(ctx, messages, detailHolder) {
  return table([
    { label: "Stored", value: m => fmt.time(m.storeTimestamp) },
    { label: "Topic", value: m => m.topic },
    { label: "Queue", value: m => m.queueId, num: true },
    { label: "Offset", value: m => fmt.count(m.queueOffset), num: true },
    { label: "Keys", value: m => m.keys.join(" ") || "–" },
    { label: "Tags", value: m => m.tags ?? "–" },
    { label: "Body", value: m => h("span", { class: "preview" }, m.bodyHidden ? `‹${fmt.bytes(m.bodySize)} hidden›`
      : m.body === null ? `‹${fmt.bytes(m.bodySize)} binary›` : m.body.slice(0, 80)) },
    { label: "Size", value: m => fmt.bytes(m.bodySize), num: true },
  ], messages, {
    empty: "No message found.", testid: "results",
    rowAttrs: m => ({ class: "clickable", tabindex: 0, "data-msgid": m.msgId, onclick: () => {
      clear(detailHolder, detailCard(ctx, m));
      detailHolder.scrollIntoView({ behavior: "smooth", block: "start" });
    } }),
  });
}

async function exportResults(ctx, params, format, progress) {
  const url = `${api.cluster(ctx.cluster)}/messages/export${api.query({ ...params, format })}`;
  const response = await fetch(url);
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try { message = (await response.json()).error; } catch { /* keep the status */ }
    throw new Error(message);
  }
  const expected = Number(response.headers.get("X-FerryMQ-Expected") || 0);
  const name = /filename="([^"]+)"/.exec(response.headers.get("Content-Disposition") || "")?.[1] ?? `export.${format}`;
  const reader = response.body.getReader();
  const chunks = [];
  let size = 0, lines = 0;
  const bar = h("progress", { max: Math.max(1, expected), value: 0 });
  const text = h("span", {}, "starting…");
  clear(progress, bar, text);
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    size += value.length;
    for (const b of value) if (b === 10) lines += 1;
    const rows = format === "csv" ? Math.max(0, lines - 1) : lines;
    bar.value = Math.min(rows, bar.max);
    text.textContent = ` ${fmt.count(rows)}${expected ? ` of up to ${fmt.count(expected)}` : ""} message(s), ${fmt.bytes(size)}`;
  }
  const blob = new Blob(chunks, { type: response.headers.get("Content-Type") || "application/octet-stream" });
  const link = h("a", { href: URL.createObjectURL(blob), download: name, hidden: true });
  document.body.append(link);
  link.click();
  setTimeout(() => { URL.revokeObjectURL(link.href); link.remove(); }, 10000);
  clear(progress, h("span", { class: "ok-text", "data-testid": "export-done" }, `✓ ${name}: ${fmt.bytes(size)}`));
}

export async function render(ctx) {
  const p = ctx.params;
  const mode = MODES.some(([m]) => m === p.mode) ? p.mode : "key";
  const topics = await api.get(`${api.cluster(ctx.cluster)}/topics`).then(d => d.topics.map(t => t.topic)).catch(() => []);
  if (!ctx.current()) return;
  const now = Date.now();
  const inputs = {
    topic: h("input", { name: "topic", list: "topic-names", value: p.topic ?? "", required: mode !== "id", autocomplete: "off", "data-testid": "msg-topic" }),
    key: h("input", { name: "key", value: p.key ?? "", required: true, "data-testid": "msg-key" }),
    id: h("input", { name: "id", value: p.id ?? "", required: true, size: 34, "data-testid": "msg-id" }),
    traceTopic: h("input", { name: "traceTopic", value: p.traceTopic ?? "", placeholder: "the brokers' trace topic", autocomplete: "off", "data-testid": "trace-topic" }),
    begin: h("input", { name: "begin", type: "datetime-local", step: 1, value: fmt.toLocalInput(p.begin ? Number(p.begin) : now - 3600_000), "data-testid": "msg-begin" }),
    end: h("input", { name: "end", type: "datetime-local", step: 1, value: fmt.toLocalInput(p.end ? Number(p.end) : now + 60_000), "data-testid": "msg-end" }),
  };
  const fields = {
    key: () => [field("Topic", inputs.topic), field("Key", inputs.key)],
    id: () => [field("Message id", inputs.id, "offset msgId, or a client id with its topic"), field("Topic", inputs.topic, "for a client message id")],
    time: () => [field("Topic", inputs.topic), field("From", inputs.begin), field("To", inputs.end)],
    trace: () => [field("Message id", inputs.id, "the id the producer was given, or the offset msgId"),
                  field("Trace topic", inputs.traceTopic, "optional: a client's own trace topic")],
  }[mode]();
  const results = h("div");
  const detailHolder = h("div");
  const progress = h("div", { class: "progress", "data-testid": "export-progress" });
  const search = () => {
    const s = { mode, topic: inputs.topic.value.trim() };
    if (mode === "key") s.key = inputs.key.value.trim();
    if (mode === "id") s.id = inputs.id.value.trim();
    if (mode === "time") {
      s.begin = fmt.fromLocalInput(inputs.begin.value);
      s.end = fmt.fromLocalInput(inputs.end.value);
      if (s.begin === null || s.end === null) throw new Error("pick both ends of the time range");
    }
    return s;
  };
  const pages = [];  // cursors of the pages shown so far (time mode)
  const run = async (cursor) => {
    if (mode === "trace") {
      clear(detailHolder);
      clear(results, traceView(ctx, inputs.id.value.trim(), inputs.traceTopic.value.trim()));
      return;
    }
    const s = search();
    const path = `${api.cluster(ctx.cluster)}/messages/by-${mode}`;
    const data = await api.get(path + api.query(mode === "time" ? { ...s, mode: undefined, cursor, limit: 50 } : { ...s, mode: undefined }));
    if (!ctx.current()) return;
    clear(detailHolder);
    const pager = mode === "time" ? h("div", { class: "pager" },
      h("span", { class: "muted", "data-testid": "result-count" }, `page ${pages.length + 1} · ${data.messages.length} message(s) of about ${fmt.count(data.estimatedTotal)} in the range`),
      h("button", { class: "secondary", disabled: !pages.length, onclick: e => busy(e.currentTarget, () => run(pages.pop())) }, "← Previous"),
      h("button", { class: "secondary", disabled: !data.next, "data-testid": "next-page", onclick: e => busy(e.currentTarget, () => { pages.push(cursor ?? ""); return run(data.next); }) }, "Next →"))
      : h("p", { class: "muted", "data-testid": "result-count" }, `${data.total} message(s)`);
    clear(results, pager, resultsTable(ctx, data.messages, detailHolder),
      h("div", { class: "toolbar" },
        h("span", { class: "muted" }, "Export every match:"),
        ...[["jsonl", "JSON lines"], ["csv", "CSV"]].map(([f, l]) => h("button", { class: "secondary", "data-testid": `export-${f}`,
          onclick: e => busy(e.currentTarget, () => exportResults(ctx, search(), f, progress)) }, l)),
        progress));
    if (data.messages.length === 1 && mode === "id") clear(detailHolder, detailCard(ctx, data.messages[0]));
  };
  const form = h("form", { class: "toolbar search", onsubmit: e => {
    e.preventDefault();
    pages.length = 0;
    busy(e.submitter || form.querySelector("button[type=submit]"), () => run(undefined));
  } }, fields, h("button", { type: "submit", class: "primary", "data-testid": "search" }, "Search"));
  clear(ctx.root,
    h("div", { class: "page-head" }, h("h1", {}, "Messages")),
    h("div", { class: "chips", role: "group", "aria-label": "search by" }, MODES.map(([m, l]) =>
      h("button", { class: `chip${m === mode ? " active" : ""}`, onclick: () => ctx.navigate("messages", { mode: m, topic: inputs.topic.value }) }, l))),
    h("datalist", { id: "topic-names" }, topics.map(t => h("option", { value: t }))),
    card(null, form, results),
    detailHolder);
  const ready = mode === "key" ? p.topic && p.key : mode === "id" || mode === "trace" ? p.id : mode === "time" && p.topic && p.begin;
  if (ready) await run(undefined).catch(e => toast(e.message, "error"));
}
