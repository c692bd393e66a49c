// A message's trace (docs/trace.md#in-the-console): its publish, any transaction end, and per
// consumer group each delivery with its result, from the records `ferrymq admin message trace`
// reads; or why there is nothing to show. Used by the message detail and the Trace search.

import * as api from "./api.js";
import { clear, h, jsonLink, spinner, table } from "./dom.js";
import * as fmt from "./format.js";

const text = v => (v === null || v === undefined || v === "" ? "–" : String(v));
const ms = v => (v === null || v === undefined ? "–" : `${v} ms`);
// How a listener ended when not with success (RocketMQ's ConsumeReturnType).
const ENDED = { FAILED: "reconsume later", EXCEPTION: "threw an exception", TIME_OUT: "timed out", RETURNNULL: "returned null" };

function result(success) {
  if (success === null || success === undefined) return h("span", { class: "muted", title: "the consumer's SubAfter record never arrived" }, "no result");
  return h("span", { class: `badge ${success ? "good" : "bad"}` }, success ? "success" : "failed");
}

function publishTable(rows) {
  return table([
    { label: "Sent", value: e => fmt.time(e.timestamp), key: "sent" },
    { label: "Producer group", value: e => text(e.group), key: "group" },
    { label: "Client host", value: e => text(e.clientHost), key: "client" },
    { label: "Stored", value: e => fmt.time(e.storeTimestamp), key: "stored", title: "when the broker stored the message" },
    { label: "Store host", value: e => text(e.storeHost) },
    { label: "Cost", value: e => ms(e.costMs), num: true, key: "cost" },
    { label: "Type", value: e => text(e.msgType) },
    { label: "Status", value: e => result(e.success), key: "status" },
  ], rows, { testid: "trace-publish", empty: "No publish record: the producer may not have message trace on." });
}

function transactionTable(rows) {
  return table([
    { label: "Time", value: e => fmt.time(e.timestamp) },
    { label: "Producer group", value: e => text(e.group) },
    { label: "Client host", value: e => text(e.clientHost) },
    { label: "State", value: e => text(e.transactionState), key: "state" },
    { label: "From a check", value: e => (e.fromTransactionCheck ? "yes" : "no") },
  ], rows, { testid: "trace-transactions" });
}

function groupSection(g) {
  return h("section", { class: "trace-group", "data-group": g.group ?? "" },
    h("h4", {}, g.group ?? "(group not recorded)", " ", result(g.lastResult === "unknown" ? null : g.lastResult === "success"),
      h("span", { class: "muted" }, ` ${g.deliveries} deliver${g.deliveries === 1 ? "y" : "ies"}`)),
    table([
      { label: "Delivered", value: a => fmt.time(a.timestamp), key: "time" },
      { label: "Client host", value: a => text(a.clientHost), key: "client" },
      { label: "Retry", value: a => text(a.retryTimes), num: true, key: "retry", title: "how many times it was redelivered before" },
      { label: "Cost", value: a => ms(a.costMs), num: true, key: "cost" },
      { label: "Result", value: a => [result(a.success), ENDED[a.returnType] ? h("span", { class: "muted", title: a.returnType }, ` ${ENDED[a.returnType]}`) : null], key: "result" },
    ], g.attempts, { testid: "trace-deliveries" }));
}

// The rows `ferrymq admin message trace` prints, one per record.
function eventsTable(events) {
  return table([
    { label: "Type", value: e => e.typeName },
    { label: "Time", value: e => fmt.time(e.timestamp) },
    { label: "Group", value: e => text(e.group) },
    { label: "Client host", value: e => text(e.clientHost) },
    { label: "Cost", value: e => ms(e.costMs), num: true },
    { label: "Status", value: e => (e.transactionState ?? (e.success === null ? "–" : e.success ? "success" : "failed")) },
    { label: "Topic", value: e => text(e.topic) },
    { label: "Tags", value: e => text(e.tags) },
    { label: "Keys", value: e => text(e.keys) },
  ], events, { testid: "trace-events" });
}

function show(data, path) {
  const out = [h("p", { class: "muted trace-source" }, `Records of ${data.msgId} in ${data.traceTopic} `, jsonLink(path))];
  if (data.notice) out.push(h("div", { class: "callout warn", "data-testid": "trace-notice", role: "status" }, h("p", {}, data.notice)));
  if (data.undecodable.length) {
    out.push(h("div", { class: "callout bad" }, h("p", {}, `${data.undecodable.length} trace message(s) in ${data.traceTopic} are not trace records: `,
      data.undecodable.map(u => `${u.offsetMsgId} (${u.reason})`).join("; "))));
  }
  if (data.state !== "found") return out;
  out.push(h("h4", {}, "Publish"), publishTable(data.publish));
  if (data.transactions.length) out.push(h("h4", {}, "Transaction end"), transactionTable(data.transactions));
  out.push(h("h4", {}, "Consumer groups"));
  out.push(...(data.groups.length ? data.groups.map(groupSection)
    : [h("p", { class: "empty", "data-testid": "trace-no-consume" }, "No consume record: no consumer with message trace on has received it yet (or its records have not arrived).")]));
  out.push(h("details", { class: "trace-all" }, h("summary", {}, `All ${data.events.length} record(s), as ferrymq admin message trace prints them`),
    eventsTable(data.events)));
  return out;
}

// An element that fills itself with the trace of `msgId` (client or offset message id).
export function traceView(ctx, msgId, traceTopic) {
  const holder = h("div", { class: "trace", "data-testid": "trace" }, spinner("Reading the trace…"));
  const path = `${api.cluster(ctx.cluster)}/messages/trace${api.query({ id: msgId, traceTopic })}`;
  api.get(path).then(
    data => { if (ctx.current()) clear(holder, show(data, path)); },
    e => { if (ctx.current()) clear(holder, h("p", { class: "error-box", role: "alert" }, `The trace cannot be read: ${e.message}`)); });
  return holder;
}
