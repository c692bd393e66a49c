// Topics: the list with kind filters; a topic's route and per-queue offsets; create, update,
// delete (confirmed by typing the name) and a test message.

import * as api from "../api.js";
import { busy, card, clear, dialog, field, h, jsonLink, spinner, table, toast } from "../dom.js";
import * as fmt from "../format.js";

const KINDS = [["normal", "Normal"], ["retry", "Retry"], ["dlq", "Dead letter"], ["system", "System"], ["", "All"]];

function writeButton(ctx, label, attrs, onclick) {
  return h("button", { ...attrs, disabled: ctx.readOnly, title: ctx.readOnly ? "read-only console" : null, onclick }, label);
}

function topicForm(values = {}, isNew = true) {
  return h("div", { class: "form-grid" },
    field("Topic", h("input", { name: "topic", required: true, pattern: "[%\\|a-zA-Z0-9_\\-]+", value: values.topic ?? "",
      readonly: !isNew, autocomplete: "off", "data-testid": "topic-name" }), "letters, digits, _ - % |"),
    field("Read queues", h("input", { name: "readQueues", type: "number", min: 1, max: 1024, required: true, value: values.readQueues ?? 8 })),
    field("Write queues", h("input", { name: "writeQueues", type: "number", min: 1, max: 1024, required: true, value: values.writeQueues ?? 8 })),
    field("Permission", h("select", { name: "perm" },
      [["6", "read + write"], ["4", "read only"], ["2", "write only"]].map(([v, l]) =>
        h("option", { value: v, selected: String(values.perm ?? 6) === v }, l)))));
}

async function saveTopic(ctx, values, isNew) {
  const form = await dialog(isNew ? "New topic" : `Update ${values.topic}`, topicForm(values, isNew), { confirm: isNew ? "Create" : "Update" });
  if (!form) return false;
  const result = await api.post(`${api.cluster(ctx.cluster)}/topics`, {
    topic: form.topic || values.topic, readQueues: Number(form.readQueues), writeQueues: Number(form.writeQueues), perm: Number(form.perm) });
  toast(`Topic ${result.topic} saved on ${result.brokers.join(", ")}`, "ok");
  return result.topic;
}

async function list(ctx) {
  const kind = ctx.params.kind ?? "normal";
  const data = await api.get(`${api.cluster(ctx.cluster)}/topics${api.query({ kind })}`);
  if (!ctx.current()) return;
  const filter = h("input", { type: "search", placeholder: "Filter by name…", value: ctx.params.q ?? "", "aria-label": "filter topics" });
  const holder = h("div");
  const redraw = () => {
    const needle = filter.value.trim().toLowerCase();
    const rows = data.topics.filter(t => !needle || t.topic.toLowerCase().includes(needle));
    clear(holder, table([
      { label: "Topic", value: t => h("a", { href: `#/topics?${new URLSearchParams({ cluster: ctx.cluster, topic: t.topic })}` }, t.topic) },
      { label: "Kind", value: t => h("span", { class: `kind ${t.kind}` }, t.kind) },
      { label: "Brokers", value: t => t.brokers.join(", ") || "–" },
      { label: "Read queues", value: t => t.readQueues, num: true },
      { label: "Write queues", value: t => t.writeQueues, num: true },
      { label: "Perm", value: t => h("code", {}, t.perm) },
    ], rows, { empty: "No topic matches.", testid: "topics", rowAttrs: t => ({ "data-topic": t.topic }) }),
    h("p", { class: "muted" }, `${rows.length} of ${data.topics.length} topic(s)`));
  };
  filter.addEventListener("input", redraw);
  redraw();
  clear(ctx.root,
    h("div", { class: "page-head" }, h("h1", {}, "Topics"), jsonLink(`${api.cluster(ctx.cluster)}/topics${api.query({ kind })}`),
      writeButton(ctx, "+ New topic", { class: "primary", "data-testid": "new-topic" }, async e => {
        await busy(e.currentTarget, async () => {
          const name = await saveTopic(ctx, {}, true);
          if (name) ctx.navigate("topics", { topic: name });
        });
      })),
    h("div", { class: "toolbar" },
      h("div", { class: "chips", role: "group", "aria-label": "kind" }, KINDS.map(([value, label]) =>
        h("button", { class: `chip${value === kind ? " active" : ""}`, "aria-pressed": String(value === kind),
                      onclick: () => ctx.navigate("topics", { kind: value || "" }) }, label))),
      filter),
    card(null, holder));
}

async function detail(ctx, topic) {
  const base = `${api.cluster(ctx.cluster)}/topics/${api.enc(topic)}`;
  const data = await api.get(base);
  if (!ctx.current()) return;
  const route = table([
    { label: "Broker", value: r => h("strong", {}, r.brokerName) },
    { label: "Master address", value: r => h("code", {}, r.address ?? "–") },
    { label: "Read queues", value: r => r.readQueues, num: true },
    { label: "Write queues", value: r => r.writeQueues, num: true },
    { label: "Perm", value: r => h("code", {}, r.perm) },
  ], data.route, { testid: "route" });
  const queues = table([
    { label: "Broker", value: q => q.brokerName },
    { label: "Queue", value: q => q.queueId, num: true },
    { label: "Min offset", value: q => fmt.count(q.minOffset), num: true, key: "min" },
    { label: "Max offset", value: q => fmt.count(q.maxOffset), num: true, key: "max" },
    { label: "Messages", value: q => fmt.count(q.maxOffset - q.minOffset), num: true },
    { label: "Last write", value: q => fmt.ago(q.lastUpdateTimestamp) },
  ], data.queues, { testid: "queues" });
  const totalRead = data.route.reduce((n, r) => n + r.readQueues, 0);
  const totalWrite = data.route.reduce((n, r) => n + r.writeQueues, 0);
  const perm = { "RW-": 6, "R--": 4, "-W-": 2 }[data.route[0]?.perm?.slice(0, 2) + "-"] ?? 6;
  clear(ctx.root,
    h("div", { class: "page-head" },
      h("a", { href: `#/topics?${new URLSearchParams({ cluster: ctx.cluster })}`, class: "back" }, "← Topics"),
      h("h1", {}, topic, " ", h("span", { class: `kind ${data.kind}` }, data.kind)),
      h("div", { class: "actions" },
        jsonLink(base),
        h("a", { class: "button secondary", href: `#/messages?${new URLSearchParams({ cluster: ctx.cluster, mode: "time", topic })}` }, "Browse messages"),
        writeButton(ctx, "Send test message", { class: "secondary", "data-testid": "send-test" }, e => busy(e.currentTarget, async () => {
          const form = await dialog(`Send a test message to ${topic}`, h("div", { class: "form-grid" },
            field("Body", h("textarea", { name: "body", required: true, rows: 4 }, "hello from the FerryMQ console")),
            field("Tags", h("input", { name: "tags" })), field("Keys", h("input", { name: "keys" }), "space-separated")), { confirm: "Send" });
          if (!form) return;
          const r = await api.post(`${base}/messages`, form);
          toast(`Sent: ${r.msgId} → ${r.brokerName} queue ${r.queueId} offset ${r.queueOffset}`, "ok");
          await detail(ctx, topic);
        })),
        writeButton(ctx, "Edit", { class: "secondary" }, e => busy(e.currentTarget, async () => {
          if (await saveTopic(ctx, { topic, readQueues: data.route[0]?.readQueues, writeQueues: data.route[0]?.writeQueues, perm }, false)) await detail(ctx, topic);
        })),
        writeButton(ctx, "Delete", { class: "danger", "data-testid": "delete-topic" }, e => busy(e.currentTarget, async () => {
          const form = await dialog(`Delete ${topic}?`, h("div", {},
            h("p", {}, `This deletes the topic and its ${fmt.count(data.messages)} stored message(s) from every broker and name server. Type the topic's name to confirm.`),
            field("Topic", h("input", { name: "confirm", required: true, autocomplete: "off", pattern: topic.replace(/[.*+?^${}()|[\]\\]/g, "\\$&") }))),
            { confirm: "Delete", danger: true });
          if (!form) return;
          await api.del(base);
          toast(`Topic ${topic} deleted`, "ok");
          ctx.navigate("topics");
        })))),
    h("div", { class: "stats" },
      h("div", { class: "stat" }, h("span", { class: "stat-value", "data-testid": "topic-messages" }, fmt.count(data.messages)), h("span", { class: "stat-label" }, "messages stored")),
      h("div", { class: "stat" }, h("span", { class: "stat-value" }, `${totalRead} / ${totalWrite}`), h("span", { class: "stat-label" }, "read / write queues")),
      h("div", { class: "stat" }, h("span", { class: "stat-value" }, data.route.length), h("span", { class: "stat-label" }, "brokers")),
      h("div", { class: "stat" }, h("span", { class: "stat-value", "data-testid": "topic-timers" }, fmt.count(data.timers.pending)),
        h("span", { class: "stat-label" }, data.timers.earliestDueMs == null ? "timer messages waiting" : `timer messages waiting, first due ${fmt.time(data.timers.earliestDueMs)}`))),
    card("Route", route),
    card("Queues", queues));
}

export async function render(ctx) {
  ctx.root.append(spinner());
  if (ctx.params.topic) await detail(ctx, ctx.params.topic);
  else await list(ctx);
}
