// Overview: the cluster's brokers (role, disk, traffic), its message rates over the last
// minutes, and the alerts derived from them. Refreshes itself every sample interval.

import * as api from "../api.js";
import { rateChart } from "../chart.js";
import { card, clear, h, jsonLink, spinner, table } from "../dom.js";
import * as fmt from "../format.js";

function stat(label, value, testid) {
  return h("div", { class: "stat" }, h("span", { class: "stat-value", "data-testid": testid }, value), h("span", { class: "stat-label" }, label));
}

function diskCell(b) {
  if (b.diskRatio === undefined || b.diskRatio === null) return "–";
  const warn = b.diskWarningRatio ?? 0.9;
  const cls = b.diskRatio >= warn ? "bad" : b.diskRatio >= warn - 0.1 ? "warn" : "ok";
  return h("div", { class: "meter-cell", title: `warning at ${fmt.percent(warn)}` },
    h("div", { class: `meter ${cls}` }, h("div", { style: null, class: "meter-fill", dataset: { ratio: b.diskRatio } })),
    h("span", {}, fmt.percent(b.diskRatio)));
}

function draw(root, data, ctx) {
  const last = data.rates.length ? data.rates[data.rates.length - 1] : null;
  const masters = data.brokers.filter(b => b.brokerId === 0).length;
  const alerts = data.alerts.length
    ? h("ul", { class: "alerts", "data-testid": "alerts" }, data.alerts.map(a =>
        h("li", { class: `alert ${a.severity}` }, h("span", { class: "sev" }, a.severity), h("strong", {}, a.subject), " ", a.message)))
    : h("p", { class: "all-good", "data-testid": "alerts" }, "✓ No alerts: every broker answers, no group is disabled, disks are below their warning ratio.");
  const brokers = table([
    { label: "Cluster", value: b => b.cluster },
    { label: "Broker", value: b => h("strong", {}, b.brokerName) },
    { label: "Role", value: b => h("span", { class: `role ${b.brokerId === 0 ? "master" : "slave"}` }, b.role) },
    { label: "Address", value: b => h("code", {}, b.address) },
    { label: "Version", value: b => b.version ?? "–" },
    { label: "Disk used", value: diskCell },
    { label: "Commit log", value: b => fmt.bytes(b.commitLogBytes), num: true },
    { label: "In", value: b => fmt.rate(b.inRate), num: true },
    { label: "Out", value: b => fmt.rate(b.outRate), num: true },
    { label: "Messages in", value: b => fmt.count(b.messagesIn), num: true, title: "since the broker started" },
    { label: "Held pulls", value: b => fmt.count(b.heldPulls), num: true, title: "long-polling pulls waiting for a message" },
    { label: "Up", value: b => b.error ? h("span", { class: "bad-text" }, "not answering") : fmt.duration(b.uptimeMs), num: true },
  ], data.brokers, { empty: "No broker is registered with the name servers.", testid: "brokers" });

  clear(root,
    h("div", { class: "page-head" },
      h("h1", {}, "Overview"),
      h("span", { class: "muted" }, `${data.cluster} · name servers ${data.namesrv} · updated ${fmt.time(data.time)}`),
      jsonLink(`${api.cluster(ctx.cluster)}/overview`)),
    h("div", { class: "stats" },
      stat("brokers (masters)", `${data.brokers.length} (${masters})`, "stat-brokers"),
      stat("topics", fmt.count(data.topics), "stat-topics"),
      stat("consumer groups", fmt.count(data.groups), "stat-groups"),
      stat("in", last ? fmt.rate(last[1]) : "–", "stat-in"),
      stat("out", last ? fmt.rate(last[2]) : "–", "stat-out")),
    card("Alerts", alerts),
    card(`Messages in / out per second, last ${fmt.duration((data.rates.length ? data.rates[data.rates.length - 1][0] - data.rates[0][0] : 0)) }`,
      h("div", { class: "legend" }, h("span", { class: "key in" }, "in"), h("span", { class: "key out" }, "out"),
        h("span", { class: "muted" }, `a point every ${ctx.config.sampleSeconds}s`)),
      rateChart(data.rates, { format: fmt.compact })),
    card("Brokers", brokers));
  // Meter widths through CSSOM (the page's CSP allows no inline style attributes).
  for (const el of root.querySelectorAll(".meter-fill")) el.style.width = `${Math.min(100, el.dataset.ratio * 100)}%`;
}

export async function render(ctx) {
  ctx.root.append(spinner("Reading the cluster…"));
  const load = async () => {
    const data = await api.get(`${api.cluster(ctx.cluster)}/overview`);
    if (ctx.current()) draw(ctx.root, data, ctx);
  };
  await load();
  const timer = setInterval(() => load().catch(() => {}), Math.max(2000, ctx.config.sampleSeconds * 1000));
  return () => clearInterval(timer);
}
