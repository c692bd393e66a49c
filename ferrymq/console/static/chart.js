// A small SVG line chart of message rates (in and out) over time, drawn by hand.

const NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, text) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  return el;
}

// The axis top and its number of divisions: round numbers on every grid line.
function niceScale(value) {
  if (value <= 0) return [1, 5];
  const magnitude = 10 ** Math.floor(Math.log10(value));
  for (const [step, divisions] of [[1, 5], [2, 4], [2.5, 5], [5, 5], [10, 5]]) {
    if (value <= step * magnitude) return [step * magnitude, divisions];
  }
  return [10 * magnitude, 5];
}

// points: [[epochMs, in, out], ...]; series labels and the value formatter.
export function rateChart(points, { width = 1180, height = 220, format = v => String(v) } = {}) {
  const pad = { left: 56, right: 12, top: 12, bottom: 28 };
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img",
                            "aria-label": "messages in and out per second" });
  const w = width - pad.left - pad.right, h = height - pad.top - pad.bottom;
  if (points.length < 2) {
    root.append(svg("text", { x: width / 2, y: height / 2, "text-anchor": "middle", class: "chart-empty" },
      "Collecting samples…"));
    return root;
  }
  const t0 = points[0][0], t1 = points[points.length - 1][0];
  const [top, divisions] = niceScale(Math.max(...points.map(p => Math.max(p[1], p[2]))));
  const x = t => pad.left + (t1 === t0 ? 0 : (t - t0) / (t1 - t0) * w);
  const y = v => pad.top + h - v / top * h;
  for (let i = 0; i <= divisions; i++) {
    const v = top * i / divisions;
    root.append(svg("line", { x1: pad.left, x2: pad.left + w, y1: y(v), y2: y(v), class: "grid" }));
    root.append(svg("text", { x: pad.left - 6, y: y(v) + 4, "text-anchor": "end", class: "axis" }, format(v)));
  }
  const clock = t => new Date(t).toTimeString().slice(0, 5);
  root.append(svg("text", { x: pad.left, y: height - 8, class: "axis" }, clock(t0)));
  root.append(svg("text", { x: pad.left + w, y: height - 8, "text-anchor": "end", class: "axis" }, clock(t1)));
  for (const [index, cls] of [[1, "in"], [2, "out"]]) {
    const d = points.map((p, i) => `${i ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[index]).toFixed(1)}`).join(" ");
    const area = `${d} L${x(t1).toFixed(1)},${y(0)} L${x(t0).toFixed(1)},${y(0)} Z`;
    root.append(svg("path", { d: area, class: `area ${cls}` }));
    root.append(svg("path", { d, class: `line ${cls}` }));
  }
  return root;
}
