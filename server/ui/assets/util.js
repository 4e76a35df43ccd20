// Small helpers shared by the views: escaping, number and duration formats, and
// Go duration strings (the settings API's format) parsed and printed.

export function esc(v) {
  return String(v ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

export function num(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toFixed(a >= 1e10 ? 0 : 1) + "G";
  if (a >= 1e6) return (n / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
  if (a >= 1e4) return (n / 1e3).toFixed(a >= 1e5 ? 0 : 1) + "k";
  return String(Math.round(n));
}

// dur prints milliseconds the way people read a wait: "850 ms", "12 s", "3 m 05 s", "2 h 10 m".
export function dur(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "–";
  ms = Math.max(0, Math.round(ms));
  if (ms < 1000) return ms + " ms";
  const s = ms / 1000;
  if (s < 60) return (s < 10 ? s.toFixed(1) : Math.round(s)) + " s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + " m " + String(Math.floor(s % 60)).padStart(2, "0") + " s";
  const h = Math.floor(m / 60);
  return h + " h " + String(m % 60).padStart(2, "0") + " m";
}

export function ago(t, now = Date.now()) {
  return dur(now - new Date(t).getTime()) + " ago";
}

export function clock(t) {
  const d = new Date(t);
  return d.toLocaleTimeString([], { hour12: false });
}

const units = { ns: 1e-6, us: 1e-3, "µs": 1e-3, "μs": 1e-3, ms: 1, s: 1000, m: 60000, h: 3600000 };

// parseDuration reads a Go duration string ("2s", "1m30s", "500ms", "1.5h") into
// milliseconds, or throws saying what is wrong.
export function parseDuration(text) {
  const s = String(text).trim();
  if (s === "") throw new Error("is empty (a duration like 2s, 500ms or 1m30s)");
  if (s === "0") return 0;
  const re = /([0-9]*\.?[0-9]+)(ns|us|µs|μs|ms|s|m|h)/y;
  let ms = 0;
  let i = 0;
  const neg = s[0] === "-";
  if (neg || s[0] === "+") i = 1;
  while (i < s.length) {
    re.lastIndex = i;
    const m = re.exec(s);
    if (!m) throw new Error(`is not a duration: ${JSON.stringify(s)} (a number and a unit: ns, us, ms, s, m, h; e.g. 2s or 1m30s)`);
    ms += parseFloat(m[1]) * units[m[2]];
    i = re.lastIndex;
  }
  if (i === (neg ? 1 : 0) || (neg && i === 1)) throw new Error(`is not a duration: ${JSON.stringify(s)}`);
  return neg ? -ms : ms;
}

// goDuration prints milliseconds as a Go duration string ("1m30s", "500ms").
export function goDuration(ms) {
  if (ms === 0) return "0s";
  if (ms < 1000) return ms + "ms";
  let out = "";
  let rest = ms;
  const h = Math.floor(rest / 3600000);
  rest -= h * 3600000;
  const m = Math.floor(rest / 60000);
  rest -= m * 60000;
  if (h) out += h + "h";
  if (h || m) out += m + "m";
  const s = rest / 1000;
  out += (Number.isInteger(s) ? s : s.toFixed(3).replace(/0+$/, "")) + "s";
  return out;
}

// Ring is a bounded list: past its capacity the oldest entries go.
export class Ring {
  constructor(cap) {
    this.cap = cap;
    this.items = [];
  }
  push(x) {
    this.items.push(x);
    if (this.items.length > this.cap) this.items.splice(0, this.items.length - this.cap);
  }
  get length() {
    return this.items.length;
  }
}
