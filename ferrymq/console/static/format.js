// Human-friendly numbers: bytes, rates, durations, counts and times.

const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

export function bytes(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  let value = Number(n), unit = 0;
  while (Math.abs(value) >= 1024 && unit < BYTE_UNITS.length - 1) { value /= 1024; unit += 1; }
  return `${unit === 0 ? value : value.toFixed(value < 10 ? 2 : 1)} ${BYTE_UNITS[unit]}`;
}

export function count(n) {
  if (n === null || n === undefined) return "–";
  return Number(n).toLocaleString("en-US");
}

export function compact(n) {
  if (n === null || n === undefined) return "–";
  const abs = Math.abs(n);
  if (abs >= 1e9) return `${(n / 1e9).toFixed(1)}G`;
  if (abs >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (abs >= 1e4) return `${(n / 1e3).toFixed(1)}k`;
  return abs >= 100 || Number.isInteger(n) ? `${Math.round(n)}` : n.toFixed(1);
}

export function rate(perSecond) {
  if (perSecond === null || perSecond === undefined) return "–";
  if (perSecond > 0 && perSecond < 0.1) return `${(perSecond * 60).toFixed(1)} msg/min`;
  return `${compact(perSecond)} msg/s`;
}

export function percent(ratio) {
  if (ratio === null || ratio === undefined) return "–";
  return `${(ratio * 100).toFixed(ratio < 0.1 ? 1 : 0)}%`;
}

export function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  let s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const parts = [];
  for (const [size, label] of [[86400, "d"], [3600, "h"], [60, "m"]]) {
    if (s >= size) { parts.push(`${Math.floor(s / size)}${label}`); s %= size; }
  }
  return parts.slice(0, 2).join(" ");
}

export function time(ms) {
  if (!ms || ms <= 0) return "–";
  const d = new Date(ms);
  const pad = (v, w = 2) => String(v).padStart(w, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
         `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

export function ago(ms) {
  if (!ms || ms <= 0) return "never";
  const delta = Date.now() - ms;
  return delta < 1000 ? "just now" : `${duration(delta)} ago`;
}

// A datetime-local input value (local time) <-> epoch ms.
export function toLocalInput(ms) {
  const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60000);
  return d.toISOString().slice(0, 19);
}

export function fromLocalInput(text) {
  const ms = new Date(text).getTime();
  return Number.isNaN(ms) ? null : ms;
}
