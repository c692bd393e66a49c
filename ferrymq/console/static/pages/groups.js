// Consumer groups: the list with lag and online clients; a group's clients, subscriptions
// and per-queue lag; re-enabling a group protection disabled; offset resets with a preview.

import * as api from "../api.js";
import { busy, card, clear, dialog, field, h, jsonLink, spinner, table, toast } from "../dom.js";
import * as fmt from "../format.js";

function stateBadge(enabled) {
  return enabled === false ? h("span", { class: "badge bad", "data-testid": "consume-state" }, "consume disabled")
                           : h("span", { class: "badge good", "data-testid": "consume-state" }, "consuming");
}

// 4.x clients speak remoting; RocketMQ 5 clients gRPC (v2); POP receivers pop over remoting.
const PROTOCOL_NAMES = { "remoting": "4.x remoting", "gRPC v2": "5.x gRPC", "POP": "POP" };

function protocolBadge(protocol) {
  return h("span", { class: "badge", "data-protocol": protocol }, PROTOCOL_NAMES[protocol] ?? protocol);
}

function protocolBadges(counts) {
  const entries = Object.entries(counts ?? {});
  return entries.length ? h("span", {}, ...entries.map(([p, n]) => h("span", {}, protocolBadge(p), ` ${n} `))) : "–";
}

async function list(ctx) {
  const system = ctx.params.system === "1";
  const data = await api.get(`${api.cluster(ctx.cluster)}/groups${api.query({ system: system ? 1 : "" })}`);
  if (!ctx.current()) return;
  const totalLag = data.groups.reduce((n, g) => n + (g.totalLag ?? 0), 0);
  clear(ctx.root,
    h("div", { class: "page-head" }, h("h1", {}, "Consumer groups"),
      jsonLink(`${api.cluster(ctx.cluster)}/groups${api.query({ system: system ? 1 : "" })}`),
      h("label", { class: "check" }, h("input", { type: "checkbox", checked: system,
        onchange: e => ctx.navigate("groups", { system: e.target.checked ? "1" : "" }) }), " show system groups")),
    card(null, table([
      { label: "Group", value: g => h("a", { href: `#/groups?${new URLSearchParams({ cluster: ctx.cluster, group: g.group })}` }, g.group) },
      { label: "State", value: g => stateBadge(g.consumeEnable) },
      { label: "Clients online", value: g => g.clients, num: true },
      { label: "Protocols", value: g => protocolBadges(g.clientsByProtocol), key: "protocols" },
      { label: "Lag", value: g => g.error ? h("span", { class: "bad-text", title: g.error }, "unreadable")
          : h("span", { class: g.totalLag > 0 ? "lag" : null }, fmt.count(g.totalLag)), num: true, key: "lag" },
      { label: "Consume rate", value: g => fmt.rate(g.consumeTps), num: true },
      { label: "Topics", value: g => g.topics.filter(t => !t.startsWith("%RETRY%")).join(", ") || "–" },
      { label: "Brokers", value: g => g.brokers.join(", ") },
    ], data.groups, { empty: "No consumer group yet.", testid: "groups", rowAttrs: g => ({ "data-group": g.group }) }),
    h("p", { class: "muted" }, `${data.groups.length} group(s), ${fmt.count(totalLag)} message(s) behind in all`)));
}

function previewTable(rows) {
  return table([
    { label: "Broker", value: r => r.brokerName },
    { label: "Queue", value: r => r.queueId, num: true },
    { label: "Now at", value: r => r.current === null || r.current < 0 ? "none" : fmt.count(r.current), num: true },
    { label: "Moves to", value: r => fmt.count(r.target), num: true, key: "target" },
    { label: "Change", value: r => h("span", { class: r.delta < 0 ? "moves-back" : r.delta > 0 ? "moves-fwd" : "muted" },
        r.delta === 0 ? "stays" : `${r.delta > 0 ? "+" : ""}${fmt.count(r.delta)}`), num: true },
    { label: "Then to consume", value: r => fmt.count(r.toConsume), num: true },
  ], rows, { testid: "reset-preview" });
}

function resetCard(ctx, group, topics) {
  const base = `${api.cluster(ctx.cluster)}/groups/${api.enc(group)}`;
  const topic = h("select", { name: "topic", "data-testid": "reset-topic" }, topics.map(t => h("option", { value: t }, t)));
  const to = h("select", { name: "to", "data-testid": "reset-to" },
    [["earliest", "earliest (re-consume everything kept)"], ["latest", "latest (skip the backlog)"], ["time", "a point in time…"]]
      .map(([v, l]) => h("option", { value: v }, l)));
  const when = h("input", { type: "datetime-local", step: 1, value: fmt.toLocalInput(Date.now() - 3600_000), hidden: true, "data-testid": "reset-time" });
  to.addEventListener("change", () => { when.hidden = to.value !== "time"; });
  const out = h("div", { class: "reset-out" });
  const point = () => {
    if (to.value !== "time") return to.value;
    const ms = fmt.fromLocalInput(when.value);
    if (ms === null) throw new Error("pick a date and time");
    return String(ms);
  };
  const preview = h("button", { class: "secondary", "data-testid": "reset-preview-button", onclick: e => busy(e.currentTarget, async () => {
    const p = await api.get(`${base}/reset-preview${api.query({ topic: topic.value, to: point() })}`);
    clear(out, h("p", {}, `${p.moving} queue(s) move; ${fmt.count(p.toConsume)} message(s) to consume afterwards.`), previewTable(p.queues));
  }) }, "Preview");
  const apply = h("button", { class: "danger", disabled: ctx.readOnly, title: ctx.readOnly ? "read-only console" : null,
    "data-testid": "reset-apply", onclick: e => busy(e.currentTarget, async () => {
      const target = point();
      const p = await api.get(`${base}/reset-preview${api.query({ topic: topic.value, to: target })}`);
      const ok = await dialog(`Reset ${group} on ${topic.value}?`, h("div", {},
        h("p", {}, `${p.moving} queue(s) move. Online clients are told and restart from the new offsets.`), previewTable(p.queues)),
        { confirm: "Reset offsets", danger: true });
      if (!ok) return;
      const r = await api.post(`${base}/reset`, { topic: topic.value, to: target });
      toast(`Offsets of ${group} on ${r.topic} reset (${r.queues.length} queue(s))`, "ok");
      ctx.navigate("groups", { group, reset: Date.now() });
    }) }, "Reset offsets");
  return card("Reset offsets", h("div", { class: "toolbar" }, field("Topic", topic), field("To", to), when, preview, apply), out);
}

async function detail(ctx, group) {
  const base = `${api.cluster(ctx.cluster)}/groups/${api.enc(group)}`;
  const data = await api.get(base);
  if (!ctx.current()) return;
  const topics = [...new Set(data.queues.map(q => q.topic).concat(data.subscriptions.map(s => s.topic)))]
    .filter(t => !t.startsWith("%RETRY%")).sort();
  const byTopic = {};
  for (const q of data.queues) byTopic[q.topic] = (byTopic[q.topic] ?? 0) + q.lag;
  const lagRows = data.queues.concat([{ total: true, topic: "Total", lag: data.totalLag }]);
  const disabled = data.consumeEnable === false;
  clear(ctx.root,
    h("div", { class: "page-head" },
      h("a", { href: `#/groups?${new URLSearchParams({ cluster: ctx.cluster })}`, class: "back" }, "← Consumer groups"),
      h("h1", {}, group, " ", stateBadge(data.consumeEnable)), jsonLink(base)),
    disabled ? h("div", { class: "callout bad", role: "alert" },
      h("p", {}, h("strong", {}, "Consumption is disabled. "), "Its pulls are refused: broker protection turned it off when the group fell too far behind (consumerFallbehindThreshold), or someone disabled it."),
      h("button", { class: "primary", disabled: ctx.readOnly, "data-testid": "enable-group", onclick: e => busy(e.currentTarget, async () => {
        await api.post(`${base}/consume`, { enable: true });
        toast(`${group} may consume again`, "ok");
        await detail(ctx, group);
      }) }, "Re-enable consumption")) : null,
    h("div", { class: "stats" },
      h("div", { class: "stat" }, h("span", { class: "stat-value", "data-testid": "total-lag" }, fmt.count(data.totalLag)), h("span", { class: "stat-label" }, "messages behind")),
      h("div", { class: "stat" }, h("span", { class: "stat-value" }, data.clients.length), h("span", { class: "stat-label" }, "clients online")),
      h("div", { class: "stat" }, h("span", { class: "stat-value" }, fmt.rate(data.consumeTps)), h("span", { class: "stat-label" }, "consume rate")),
      h("div", { class: "stat" }, h("span", { class: "stat-value" }, data.messageModel ?? "–"), h("span", { class: "stat-label" }, "message model"))),
    card("Clients online", table([
      { label: "Client id", value: c => h("code", {}, c.clientId) },
      { label: "Protocol", value: c => protocolBadge(c.protocol), key: "protocol" },
      { label: "Address", value: c => c.address },
      { label: "Language", value: c => c.language },
      { label: "Version", value: c => c.version },
      { label: "Subscriptions", value: c => Object.entries(c.subscriptions).map(([t, e]) => `${t}: ${e}`).join(", ") || "–" },
    ], data.clients, { empty: "No client of this group is online.", testid: "clients",
      rowAttrs: c => ({ "data-client": c.clientId }) }),
      data.subscriptions.length ? h("p", { class: "muted" }, "Subscriptions: ",
        data.subscriptions.map(s => h("code", { class: "sub" }, `${s.topic}: ${s.expression}`))) : null),
    card("Lag per queue", table([
      { label: "Topic", value: q => q.total ? h("strong", {}, "Total") : q.topic },
      { label: "Broker", value: q => q.brokerName ?? "" },
      { label: "Queue", value: q => q.queueId ?? "", num: true },
      { label: "Broker offset", value: q => q.total ? "" : fmt.count(q.brokerOffset), num: true },
      { label: "Consumer offset", value: q => q.total ? "" : fmt.count(q.consumerOffset), num: true, key: "consumer-offset" },
      { label: "Lag", value: q => q.total ? h("strong", {}, fmt.count(q.lag)) : fmt.count(q.lag), num: true, key: "lag" },
      { label: "Last consumed", value: q => q.total ? "" : fmt.ago(q.lastTimestamp) },
    ], data.queues.length ? lagRows : [], { empty: "The group has no offsets yet.", testid: "lag",
      rowAttrs: q => ({ class: q.total ? "total" : null, "data-queue": q.total ? "total" : `${q.topic}/${q.brokerName}/${q.queueId}` }) }),
      Object.keys(byTopic).length > 1 ? h("p", { class: "muted" }, Object.entries(byTopic).map(([t, n]) => `${t}: ${fmt.count(n)}`).join(" · ")) : null),
    topics.length ? resetCard(ctx, group, topics) : null);
}

export async function render(ctx) {
  ctx.root.append(spinner());
  if (ctx.params.group) await detail(ctx, ctx.params.group);
  else await list(ctx);
}
