// Charts drawn as plain SVG strings: a line chart for a model's learned quota
// and trigger over time, and the retry curve's bars. No library: each is a
// few scales and a path.
import { esc, num, dur } from "/ui/util.js";

// lineChart draws series [{name, cls, points:[{t, v}]}] over time, with the
// y axis from 0 to the largest value. It is an accessible image: its title
// names what it shows.
export function lineChart(series, { width = 360, height = 120, title = "" } = {}) {
  const pad = { l: 44, r: 8, t: 8, b: 18 };
  const pts = series.flatMap((s) => s.points);
  if (pts.length < 2 || Math.max(...pts.map((p) => p.t)) - Math.min(...pts.map((p) => p.t)) < 2000) {
    return `<div class="chart-empty">history builds up as the console watches</div>`;
  }
  const t0 = Math.min(...pts.map((p) => p.t));
  const t1 = Math.max(...pts.map((p) => p.t), t0 + 1);
  const vmax = Math.max(...pts.map((p) => p.v), 1) * 1.08;
  const x = (t) => pad.l + ((t - t0) / (t1 - t0)) * (width - pad.l - pad.r);
  const y = (v) => height - pad.b - (v / vmax) * (height - pad.t - pad.b);
  let out = `<svg class="chart" viewBox="0 0 ${width} ${height}" role="img" aria-label="${esc(title)}"><title>${esc(title)}</title>`;
  for (const f of [0, 0.5, 1]) {
    const v = (vmax / 1.08) * f;
    out += `<line class="grid" x1="${pad.l}" x2="${width - pad.r}" y1="${y(v)}" y2="${y(v)}"/>`;
    out += `<text class="axis" x="${pad.l - 4}" y="${y(v) + 3}" text-anchor="end">${num(v)}</text>`;
  }
  out += `<text class="axis" x="${pad.l}" y="${height - 4}">−${dur(t1 - t0)}</text>`;
  out += `<text class="axis" x="${width - pad.r}" y="${height - 4}" text-anchor="end">now</text>`;
  for (const s of series) {
    if (s.points.length === 0) continue;
    const d = s.points.map((p, i) => `${i ? "L" : "M"}${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join("");
    out += `<path class="line ${esc(s.cls)}" d="${d}"><title>${esc(s.name)}</title></path>`;
  }
  return out + "</svg>";
}

// curveChart draws the retry curve: one bar a round (its wait, and with jitter
// its longest wait as a lighter cap), and the cumulative longest wait as a line
// on its own scale.
export function curveChart(points, { width = 720, height = 240 } = {}) {
  if (points.length === 0) {
    return `<div class="chart-empty">rounds: 0 — gatectl never retries on the curve</div>`;
  }
  const pad = { l: 52, r: 56, t: 20, b: 26 };
  const iw = width - pad.l - pad.r;
  const ih = height - pad.t - pad.b;
  const bmax = Math.max(...points.map((p) => p.longest), 1);
  const cmax = Math.max(points[points.length - 1].cumLongest, 1);
  const bw = iw / points.length;
  const yb = (v) => pad.t + ih - (v / bmax) * ih;
  const yc = (v) => pad.t + ih - (v / cmax) * ih;
  let out = `<svg class="chart curve" viewBox="0 0 ${width} ${height}" role="img" aria-label="retry curve"><title>retry curve: wait per round and cumulative longest wait</title>`;
  for (const f of [0, 0.5, 1]) {
    out += `<line class="grid" x1="${pad.l}" x2="${width - pad.r}" y1="${yb(bmax * f)}" y2="${yb(bmax * f)}"/>`;
    out += `<text class="axis" x="${pad.l - 4}" y="${yb(bmax * f) + 3}" text-anchor="end">${dur(bmax * f)}</text>`;
    out += `<text class="axis cum" x="${width - pad.r + 4}" y="${yc(cmax * f) + 3}">${dur(cmax * f)}</text>`;
  }
  const labelEvery = Math.ceil(points.length / 16);
  points.forEach((p, i) => {
    const x0 = pad.l + i * bw + bw * 0.15;
    const w = Math.max(bw * 0.7, 1);
    out += `<g class="round" data-round="${p.round}"><title>round ${p.round}: ${dur(p.delay)} (longest ${dur(p.longest)}), ${dur(p.cumLongest)} at most by then</title>`;
    out += `<rect class="bar-long" x="${x0}" y="${yb(p.longest)}" width="${w}" height="${Math.max(pad.t + ih - yb(p.longest), 0)}"/>`;
    out += `<rect class="bar" x="${x0}" y="${yb(p.delay)}" width="${w}" height="${Math.max(pad.t + ih - yb(p.delay), 0)}"/></g>`;
    if (points.length <= 12) {
      out += `<text class="axis val" x="${x0 + w / 2}" y="${yb(p.longest) - 4}" text-anchor="middle">${dur(p.delay)}</text>`;
    }
    if (i % labelEvery === 0) {
      out += `<text class="axis" x="${x0 + w / 2}" y="${height - 8}" text-anchor="middle">${p.round}</text>`;
    }
  });
  const d = points.map((p, i) => `${i ? "L" : "M"}${(pad.l + i * bw + bw / 2).toFixed(1)},${yc(p.cumLongest).toFixed(1)}`).join("");
  out += `<path class="line cum" d="${d}"/>`;
  points.forEach((p, i) => {
    out += `<circle class="dot cum" cx="${(pad.l + i * bw + bw / 2).toFixed(1)}" cy="${yc(p.cumLongest).toFixed(1)}" r="2.5"/>`;
  });
  return out + "</svg>";
}
