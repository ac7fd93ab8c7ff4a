// Hand-written SVG plots: line charts, heat maps, bar charts and the version lineage graph.
// Every plot root carries data-plot="<name>"; every drawn series carries data-series and
// data-n (its number of points), so tests and people can tell a drawn plot from an empty one.

import { h, fmtNumber } from "./ui.js";

const NS = "http://www.w3.org/2000/svg";
export const PALETTE = ["#2563eb", "#d97706", "#7c3aed", "#db2777", "#0891b2", "#65a30d", "#dc2626"];
export const BASELINE = "#475569";
export const STATUS_COLORS = {
  QUEUED: "#94a3b8",
  PENDING: "#94a3b8",
  RUNNING: "#2563eb",
  SUCCEEDED: "#15803d",
  READY: "#15803d",
  PARTIAL: "#b45309",
  FAILED: "#b91c1c",
  CANCELLED: "#d97706",
};
let uid = 0;

function s(tag, attrs = {}, ...children) {
  const element = document.createElementNS(NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "text") element.textContent = value;
    else if (name === "class") element.setAttribute("class", value);
    else element.setAttribute(name, String(value));
  }
  for (const child of children.flat(Infinity)) if (child) element.append(child);
  return element;
}

function round(value) {
  return Math.round(value * 100) / 100;
}

export function niceStep(span, count) {
  const raw = span / Math.max(1, count);
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / magnitude;
  return (norm >= 7.5 ? 10 : norm >= 3.5 ? 5 : norm >= 1.5 ? 2 : 1) * magnitude;
}

export function niceDomain(min, max, count = 5) {
  if (!Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
  if (min === max) {
    const pad = Math.abs(min) > 0 ? Math.abs(min) * 0.1 : 0.5;
    min -= pad;
    max += pad;
  }
  const step = niceStep(max - min, count);
  return [Math.floor(min / step + 1e-9) * step, Math.ceil(max / step - 1e-9) * step];
}

export function ticks(min, max, count = 5) {
  const step = niceStep(max - min, count);
  const result = [];
  for (let v = Math.ceil(min / step - 1e-9) * step; v <= max + step * 1e-6; v += step) {
    result.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  }
  return result;
}

function tickLabel(value, step) {
  const digits = step >= 1 ? 0 : Math.min(4, Math.ceil(-Math.log10(step)));
  return Number(value).toFixed(digits);
}

function svgRoot(name, width, height, title, description) {
  const id = `plot-${name}-${++uid}`;
  return s(
    "svg",
    { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-labelledby": `${id}-title ${id}-desc`, "data-plot": name, preserveAspectRatio: "xMidYMid meet" },
    s("title", { id: `${id}-title`, text: title }),
    s("desc", { id: `${id}-desc`, text: description || title }),
  );
}

function legendList(items) {
  return h(
    "ul",
    { class: "legend" },
    items.map((item) => {
      const swatch = h("span", { class: item.box ? "swatch-box" : "swatch", "aria-hidden": "true" });
      swatch.style.background = item.color;
      if (item.dashed) swatch.style.background = `repeating-linear-gradient(90deg, ${item.color} 0 5px, transparent 5px 8px)`;
      return h("li", {}, swatch, item.label);
    }),
  );
}

function dataTable(series, xLabel, yLabel) {
  const rows = [];
  for (const line of series) for (const [x, y] of line.points) rows.push([line.name, x, y]);
  return h(
    "details",
    { class: "data-table" },
    h("summary", { text: "Data table" }),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        {},
        h("thead", {}, h("tr", {}, h("th", { scope: "col", text: "series" }), h("th", { scope: "col", class: "num", text: xLabel }), h("th", { scope: "col", class: "num", text: yLabel }))),
        h("tbody", {}, rows.map(([name, x, y]) => h("tr", {}, h("td", { text: name }), h("td", { class: "num", text: fmtNumber(x, 3) }), h("td", { class: "num", text: fmtNumber(y, 4) })))),
      ),
    ),
  );
}

/**
 * A line chart. series: [{name, points: [[x, y]], color, dashed, markers}]; hLines: [{y, label,
 * color}]; vMarks: [{x, y1, y2, label}] (a vertical bracket, e.g. the barrier); dots: [{x, y,
 * label, color}].
 */
export function lineChart({ name, title, description, xLabel, yLabel, series, hLines = [], vMarks = [], dots = [], xDomain, yDomain, caption, width = 640, height = 330, table = true }) {
  const margin = { top: 16, right: 24, bottom: 50, left: 62 };
  const plotW = width - margin.left - margin.right;
  const plotH = height - margin.top - margin.bottom;
  const xs = series.flatMap((line) => line.points.map((p) => p[0]));
  const ys = series.flatMap((line) => line.points.map((p) => p[1])).concat(hLines.map((l) => l.y));
  const [x0, x1] = xDomain || [Math.min(...xs), Math.max(...xs)];
  const [y0, y1] = yDomain || niceDomain(Math.min(...ys), Math.max(...ys));
  const xSpan = x1 - x0 || 1;
  const ySpan = y1 - y0 || 1;
  const X = (x) => margin.left + ((x - x0) / xSpan) * plotW;
  const Y = (y) => margin.top + plotH - ((y - y0) / ySpan) * plotH;
  const svg = svgRoot(name, width, height, title, description);

  const xTicks = ticks(x0, x1, 6);
  const yTicks = ticks(y0, y1, 5);
  const xStep = niceStep(x1 - x0 || 1, 6);
  const yStep = niceStep(y1 - y0 || 1, 5);
  svg.append(
    s("g", { class: "grid" }, yTicks.map((t) => s("line", { x1: margin.left, x2: margin.left + plotW, y1: round(Y(t)), y2: round(Y(t)) }))),
    s(
      "g",
      { class: "axis axis-x" },
      s("line", { x1: margin.left, x2: margin.left + plotW, y1: margin.top + plotH, y2: margin.top + plotH }),
      xTicks.map((t) => s("g", { class: "tick" }, s("line", { x1: round(X(t)), x2: round(X(t)), y1: margin.top + plotH, y2: margin.top + plotH + 5 }), s("text", { x: round(X(t)), y: margin.top + plotH + 18, "text-anchor": "middle", text: tickLabel(t, xStep) }))),
    ),
    s(
      "g",
      { class: "axis axis-y" },
      s("line", { x1: margin.left, x2: margin.left, y1: margin.top, y2: margin.top + plotH }),
      yTicks.map((t) => s("g", { class: "tick" }, s("line", { x1: margin.left - 5, x2: margin.left, y1: round(Y(t)), y2: round(Y(t)) }), s("text", { x: margin.left - 8, y: round(Y(t)) + 4, "text-anchor": "end", text: tickLabel(t, yStep) }))),
    ),
    s("text", { class: "axis-label", x: margin.left + plotW / 2, y: height - 10, "text-anchor": "middle", text: xLabel }),
    s("text", { class: "axis-label", x: 16, y: margin.top + plotH / 2, "text-anchor": "middle", transform: `rotate(-90 16 ${margin.top + plotH / 2})`, text: yLabel }),
  );

  for (const line of hLines) {
    const y = round(Y(line.y));
    svg.append(
      s(
        "g",
        { class: "hline", "data-hline": line.label },
        s("line", { x1: margin.left, x2: margin.left + plotW, y1: y, y2: y, stroke: line.color || "#0f766e", "stroke-width": 1.5, "stroke-dasharray": "6 4" }),
        s("rect", { class: "annotation-bg", x: margin.left + plotW - 8 - line.label.length * 6.6, y: y - 17, width: line.label.length * 6.6 + 6, height: 15, rx: 3 }),
        s("text", { class: "annotation", x: margin.left + plotW - 5, y: y - 6, "text-anchor": "end", text: line.label }),
      ),
    );
  }

  series.forEach((line, index) => {
    const color = line.color || PALETTE[index % PALETTE.length];
    const points = [...line.points].sort((a, b) => a[0] - b[0]);
    const d = points.map(([x, y], i) => `${i ? "L" : "M"}${round(X(x))},${round(Y(y))}`).join(" ");
    const group = s("g", { class: "series-group" });
    group.append(
      s("path", {
        class: "series",
        d,
        fill: "none",
        stroke: color,
        "stroke-width": line.width || 2.25,
        "stroke-dasharray": line.dashed ? "7 5" : undefined,
        "stroke-linejoin": "round",
        "stroke-linecap": "round",
        "data-series": line.name,
        "data-n": points.length,
      }),
    );
    if (line.markers !== false && points.length <= 60) {
      for (const [x, y] of points) group.append(s("circle", { cx: round(X(x)), cy: round(Y(y)), r: 3.2, fill: "#fff", stroke: color, "stroke-width": 1.8 }, s("title", { text: `${line.name}: ${fmtNumber(x, 3)} → ${fmtNumber(y, 4)}` })));
    }
    svg.append(group);
  });

  for (const mark of vMarks) {
    const x = round(X(mark.x));
    const ya = round(Y(mark.y1));
    const yb = round(Y(mark.y2));
    const top = Math.min(ya, yb);
    const labelX = x + (x > margin.left + plotW * 0.7 ? -8 : 8);
    const anchor = x > margin.left + plotW * 0.7 ? "end" : "start";
    svg.append(
      s(
        "g",
        { class: "vmark", "data-vmark": mark.label },
        s("line", { x1: x, x2: x, y1: ya, y2: yb, stroke: mark.color || "#b91c1c", "stroke-width": 2.5 }),
        s("line", { x1: x - 5, x2: x + 5, y1: ya, y2: ya, stroke: mark.color || "#b91c1c", "stroke-width": 2 }),
        s("line", { x1: x - 5, x2: x + 5, y1: yb, y2: yb, stroke: mark.color || "#b91c1c", "stroke-width": 2 }),
        s("rect", { class: "annotation-bg", x: anchor === "start" ? labelX - 2 : labelX - mark.label.length * 6.6 - 2, y: top - 20, width: mark.label.length * 6.6 + 6, height: 15, rx: 3 }),
        s("text", { class: "annotation", x: labelX, y: top - 9, "text-anchor": anchor, fill: mark.color || "#b91c1c", text: mark.label }),
      ),
    );
  }

  for (const dot of dots) {
    svg.append(
      s(
        "g",
        { class: "dot" },
        s("circle", { cx: round(X(dot.x)), cy: round(Y(dot.y)), r: 5.5, fill: dot.color || "#0f766e", stroke: "#fff", "stroke-width": 2 }),
        dot.label ? s("title", { text: dot.label }) : null,
      ),
    );
  }

  const legendItems = series.map((line, index) => ({ label: line.name, color: line.color || PALETTE[index % PALETTE.length], dashed: line.dashed }));
  for (const line of hLines) legendItems.push({ label: line.label, color: line.color || "#0f766e", dashed: true });
  return h(
    "figure",
    { class: "chart" },
    title ? h("div", { class: "chart-title", text: title }) : null,
    svg,
    legendItems.length > 1 ? legendList(legendItems) : null,
    caption ? h("figcaption", { text: caption }) : null,
    table ? dataTable(series, xLabel, yLabel) : null,
  );
}

function heatColor(t) {
  // A perceptually ordered ramp (light sand → teal → deep blue), like viridis reversed.
  const stops = [
    [0, [247, 244, 226]],
    [0.25, [199, 233, 180]],
    [0.5, [65, 182, 196]],
    [0.75, [34, 94, 168]],
    [1, [12, 44, 104]],
  ];
  const v = Math.max(0, Math.min(1, t));
  for (let i = 1; i < stops.length; i += 1) {
    const [p1, c1] = stops[i];
    const [p0, c0] = stops[i - 1];
    if (v <= p1) {
      const f = (v - p0) / (p1 - p0);
      const c = c0.map((a, k) => Math.round(a + (c1[k] - a) * f));
      return [`rgb(${c.join(",")})`, 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2] < 140];
    }
  }
  return ["rgb(12,44,104)", true];
}

/** A layers × heads heat map of values in [min, max] (default 0..1), with a colour legend. */
export function heatmap({ name, title, description, matrix, rowLabel = "layer", colLabel = "head", min = 0, max = 1, marks = [], caption }) {
  const rows = matrix.length;
  const cols = Math.max(...matrix.map((row) => row.length));
  const cell = Math.max(26, Math.min(64, Math.floor(520 / Math.max(cols, 1))));
  const margin = { top: 34, right: 40, bottom: 64 + marks.length * 14, left: 74 };
  const legendW = Math.max(160, cols * cell - 2);
  const width = margin.left + Math.max(cols * cell, legendW) + margin.right;
  const height = margin.top + rows * cell + margin.bottom;
  const svg = svgRoot(name, width, height, title, description);
  const span = max - min || 1;
  svg.append(s("text", { class: "axis-label", x: margin.left + (cols * cell) / 2, y: 14, "text-anchor": "middle", text: colLabel }));
  for (let c = 0; c < cols; c += 1) svg.append(s("text", { class: "tick", x: margin.left + c * cell + cell / 2, y: margin.top - 6, "text-anchor": "middle", fill: "#5b6776", "font-size": 11, text: String(c) }));
  svg.append(s("text", { class: "axis-label", x: 14, y: margin.top + (rows * cell) / 2, "text-anchor": "middle", transform: `rotate(-90 14 ${margin.top + (rows * cell) / 2})`, text: rowLabel }));
  const cells = s("g", { class: "cells", "data-series": "cells", "data-n": rows * cols });
  matrix.forEach((row, r) => {
    svg.append(s("text", { class: "tick", x: margin.left - 8, y: margin.top + r * cell + cell / 2 + 4, "text-anchor": "end", fill: "#5b6776", "font-size": 11, text: String(r) }));
    row.forEach((value, c) => {
      const [color, dark] = heatColor((value - min) / span);
      const x = margin.left + c * cell;
      const y = margin.top + r * cell;
      cells.append(
        s("rect", { class: "cell", x, y, width: cell - 2, height: cell - 2, rx: 3, fill: color, "data-value": value, "data-row": r, "data-col": c }, s("title", { text: `${rowLabel} ${r}, ${colLabel} ${c}: ${fmtNumber(value, 3)}` })),
      );
      if (cell >= 34) cells.append(s("text", { x: x + (cell - 2) / 2, y: y + (cell - 2) / 2 + 4, "text-anchor": "middle", "font-size": cell >= 48 ? 12 : 10, fill: dark ? "#fff" : "#0f172a", "font-family": "system-ui, sans-serif", "pointer-events": "none", text: Number(value).toFixed(2) }));
    });
  });
  svg.append(cells);

  // Colour legend under the grid, with optional marks (mean, chance level).
  const legendY = margin.top + rows * cell + 18;
  const gradientId = `heat-${++uid}`;
  const gradient = s("linearGradient", { id: gradientId, x1: 0, x2: 1, y1: 0, y2: 0 });
  for (let i = 0; i <= 10; i += 1) gradient.append(s("stop", { offset: `${i * 10}%`, "stop-color": heatColor(i / 10)[0] }));
  svg.append(s("defs", {}, gradient));
  svg.append(s("rect", { x: margin.left, y: legendY, width: legendW, height: 10, rx: 2, fill: `url(#${gradientId})` }));
  svg.append(s("text", { class: "tick", x: margin.left - 6, y: legendY + 9, "text-anchor": "end", fill: "#5b6776", "font-size": 11, text: fmtNumber(min, 2) }));
  svg.append(s("text", { class: "tick", x: margin.left + legendW + 6, y: legendY + 9, "text-anchor": "start", fill: "#5b6776", "font-size": 11, text: fmtNumber(max, 2) }));
  // Marks whose labels would collide go on the next line.
  let lastX = -Infinity;
  let line = 0;
  for (const mark of [...marks].sort((a, b) => a.value - b.value)) {
    const x = margin.left + ((Math.max(min, Math.min(max, mark.value)) - min) / span) * legendW;
    line = x - lastX < 95 ? line + 1 : 0;
    lastX = x;
    const anchor = x > margin.left + legendW - 40 ? "end" : x < margin.left + 40 ? "start" : "middle";
    svg.append(s("line", { x1: x, x2: x, y1: legendY - 3, y2: legendY + 13 + line * 14, stroke: "#0f172a", "stroke-width": 2 }));
    svg.append(s("text", { class: "annotation", x, y: legendY + 36 + line * 14, "text-anchor": anchor, text: `${mark.label} ${fmtNumber(mark.value, 3)}` }));
  }
  const figure = h("figure", { class: "chart chart-heatmap" }, title ? h("div", { class: "chart-title", text: title }) : null, svg, caption ? h("figcaption", { text: caption }) : null);
  svg.style.maxWidth = `${width * 1.25}px`;
  return figure;
}

/** Horizontal bars: items [{label, value, color, note}], values in [0, max]. */
export function barChart({ name, title, description, items, max = 1, format = (v) => fmtNumber(v, 3), caption, refLine }) {
  const rowH = 34;
  const margin = { top: 8, right: 64, bottom: 26, left: 168 };
  const width = 560;
  const plotW = width - margin.left - margin.right;
  const height = margin.top + items.length * rowH + margin.bottom;
  const svg = svgRoot(name, width, height, title, description);
  const X = (v) => margin.left + (Math.max(0, v) / (max || 1)) * plotW;
  for (const t of ticks(0, max, 5)) {
    svg.append(s("line", { x1: round(X(t)), x2: round(X(t)), y1: margin.top, y2: margin.top + items.length * rowH, stroke: "#e8edf2" }));
    svg.append(s("text", { class: "tick", x: round(X(t)), y: height - 8, "text-anchor": "middle", fill: "#5b6776", "font-size": 12, text: tickLabel(t, niceStep(max, 5)) }));
  }
  const bars = s("g", { class: "bars", "data-series": "bars", "data-n": items.length });
  items.forEach((item, i) => {
    const y = margin.top + i * rowH;
    bars.append(
      s("text", { x: margin.left - 10, y: y + rowH / 2 + 5, "text-anchor": "end", "font-size": 14, fill: "#1e293b", "font-family": "system-ui, sans-serif", text: item.label }),
      s("rect", { class: "bar", x: margin.left, y: y + 5, width: Math.max(1, round(X(item.value) - margin.left)), height: rowH - 10, rx: 4, fill: item.color || PALETTE[0], "data-value": item.value }, s("title", { text: `${item.label}: ${format(item.value)}` })),
      s("text", { x: round(X(item.value)) + 6, y: y + rowH / 2 + 5, "font-size": 13.5, fill: "#334155", "font-family": "system-ui, sans-serif", "font-weight": 600, text: format(item.value) + (item.note ? `  ${item.note}` : "") }),
    );
  });
  svg.append(bars);
  if (refLine) {
    const x = round(X(refLine.value));
    svg.append(s("line", { x1: x, x2: x, y1: margin.top - 4, y2: margin.top + items.length * rowH + 2, stroke: "#0f766e", "stroke-width": 1.5, "stroke-dasharray": "5 4" }));
  }
  return h("figure", { class: "chart" }, title ? h("div", { class: "chart-title", text: title }) : null, svg, caption ? h("figcaption", { text: caption }) : null);
}

/** One horizontal bar split by status, with a legend of the counts. */
export function stackedBar({ name, title, counts, order }) {
  const total = order.reduce((sum, key) => sum + (counts[key] || 0), 0);
  const width = 640;
  const height = 34;
  const svg = svgRoot(name, width, height, title, `${total} in total`);
  const group = s("g", { class: "segments", "data-series": "segments", "data-n": order.filter((k) => counts[k]).length });
  let x = 0;
  if (total === 0) group.append(s("rect", { x: 0, y: 4, width, height: 26, rx: 6, fill: "#e5eaf0" }));
  for (const key of order) {
    const value = counts[key] || 0;
    if (!value) continue;
    const w = (value / total) * width;
    group.append(s("rect", { class: "segment", x: round(x), y: 4, width: Math.max(2, round(w) - 1), height: 26, fill: STATUS_COLORS[key] || "#94a3b8", "data-status": key, "data-value": value }, s("title", { text: `${key}: ${value}` })));
    x += w;
  }
  svg.append(group);
  return h(
    "figure",
    { class: "chart" },
    svg,
    legendList(order.map((key) => ({ label: `${key.toLowerCase()} ${counts[key] || 0}`, color: STATUS_COLORS[key] || "#94a3b8", box: true }))),
  );
}

/**
 * The lineage of a model's versions: nodes [{id, parent, label, lines, status, href, aria}],
 * laid out left to right by upgrade depth; an arrow goes from each parent to its upgrade.
 */
export function lineageGraph({ name = "lineage", title, nodes }) {
  const nodeW = 212;
  const nodeH = 90;
  const gapX = 86;
  const gapY = 24;
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const depth = new Map();
  const depthOf = (node, seen = new Set()) => {
    if (depth.has(node.id)) return depth.get(node.id);
    if (seen.has(node.id)) return 0;
    seen.add(node.id);
    const parent = node.parent !== null && node.parent !== undefined ? byId.get(node.parent) : null;
    const value = parent ? depthOf(parent, seen) + 1 : 0;
    depth.set(node.id, value);
    return value;
  };
  const columns = [];
  for (const node of nodes) {
    const d = depthOf(node);
    (columns[d] ||= []).push(node);
  }
  const rows = Math.max(1, ...columns.map((c) => (c ? c.length : 0)));
  const width = Math.max(360, columns.length * (nodeW + gapX) - gapX + 40);
  const height = rows * (nodeH + gapY) - gapY + 30;
  const svg = svgRoot(name, width, height, title, `${nodes.length} versions`);
  const markerId = `arrow-${++uid}`;
  svg.append(s("defs", {}, s("marker", { id: markerId, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 8, markerHeight: 8, orient: "auto-start-reverse" }, s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#64748b" }))));
  const position = new Map();
  columns.forEach((column, d) => {
    (column || []).forEach((node, i) => {
      const offset = ((rows - column.length) * (nodeH + gapY)) / 2;
      position.set(node.id, { x: 20 + d * (nodeW + gapX), y: 15 + offset + i * (nodeH + gapY) });
    });
  });
  const edges = s("g", { class: "edges", "data-series": "edges", "data-n": nodes.filter((n) => position.has(n.parent)).length });
  for (const node of nodes) {
    if (!position.has(node.parent)) continue;
    const from = position.get(node.parent);
    const to = position.get(node.id);
    const x1 = from.x + nodeW;
    const y1 = from.y + nodeH / 2;
    const x2 = to.x - 3;
    const y2 = to.y + nodeH / 2;
    const mid = (x1 + x2) / 2;
    edges.append(s("path", { class: "edge", d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`, fill: "none", stroke: "#64748b", "stroke-width": 2, "marker-end": `url(#${markerId})`, "data-from": node.parent, "data-to": node.id }));
  }
  svg.append(edges);
  const group = s("g", { class: "nodes", "data-series": "nodes", "data-n": nodes.length });
  for (const node of nodes) {
    const { x, y } = position.get(node.id);
    const color = STATUS_COLORS[node.status] || "#94a3b8";
    const content = s(
      "g",
      { class: "node-group", "data-node": node.id },
      s("rect", { class: "node", x, y, width: nodeW, height: nodeH, rx: 10, fill: "#ffffff", stroke: "#cbd5e1", "stroke-width": 1.5 }),
      s("rect", { x, y, width: 7, height: nodeH, rx: 3, fill: color }),
      s("text", { class: "node-label", x: x + 18, y: y + 27, text: node.label }),
      (node.lines || []).map((line, i) => s("text", { class: "node-sub", x: x + 18, y: y + 48 + i * 18, text: line })),
    );
    group.append(node.href ? s("a", { href: node.href, "aria-label": node.aria || node.label }, content) : content);
  }
  svg.append(group);
  const figure = h("figure", { class: "chart chart-lineage" }, svg);
  svg.style.maxWidth = `${width}px`;
  return figure;
}
