// DOM and formatting helpers. Text always goes in as text (never as HTML).

export function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") element.className = value;
    else if (name === "text") element.textContent = value;
    else if (name.startsWith("on") && typeof value === "function") element.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(element.dataset, value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

export function append(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

export function $(id) {
  return document.getElementById(id);
}

export function fill(target, ...children) {
  const element = typeof target === "string" ? $(target) : target;
  if (!element) return null;
  element.replaceChildren();
  append(element, children);
  element.removeAttribute("aria-busy");
  return element;
}

export function empty(text) {
  return h("p", { class: "empty", text });
}

export function showError(error) {
  const box = $("page-error");
  if (!box) return;
  box.hidden = false;
  box.textContent = error && error.detail ? `${error.code}: ${error.detail}` : String(error && error.message ? error.message : error);
}

export function clearError() {
  const box = $("page-error");
  if (box) box.hidden = true;
}

// ---------------------------------------------------------------- formatting

export const shortId = (id) => (id ? String(id).slice(0, 8) : "—");

export function fmtNumber(value, digits = 3) {
  if (value === null || value === undefined || Number.isNaN(value)) return "—";
  if (Number.isInteger(value)) return value.toLocaleString("en-US");
  return Number(value).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: 0 });
}

export function fmtPercent(value, digits = 1) {
  if (value === null || value === undefined || Number.isNaN(value)) return "—";
  return `${(Number(value) * 100).toFixed(digits)}%`;
}

export function fmtSeconds(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "—";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(s % 60).padStart(2, "0")}s`;
  const hrs = Math.floor(m / 60);
  return `${hrs}h ${String(m % 60).padStart(2, "0")}m`;
}

export function fmtBytes(bytes) {
  if (bytes === null || bytes === undefined) return "—";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = Number(bytes);
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(value < 10 && unit ? 1 : 0)} ${units[unit]}`;
}

export function fmtTime(iso) {
  if (!iso) return "—";
  const date = new Date(iso);
  return date.toLocaleString("en-GB", { year: "numeric", month: "short", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

export function fmtAgo(iso) {
  if (!iso) return "—";
  const seconds = (Date.now() - new Date(iso).getTime()) / 1000;
  if (seconds < 5) return "just now";
  if (seconds < 60) return `${Math.round(seconds)}s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86400)} d ago`;
}

export function time(iso, relative = false) {
  if (!iso) return "—";
  return h("time", { datetime: iso, title: fmtTime(iso), text: relative ? fmtAgo(iso) : fmtTime(iso) });
}

export function duration(startIso, endIso) {
  if (!startIso) return "—";
  const end = endIso ? new Date(endIso) : new Date();
  return fmtSeconds((end - new Date(startIso)) / 1000);
}

// ---------------------------------------------------------------- widgets

export function badge(value, extraClass = "") {
  const text = String(value ?? "—");
  return h("span", { class: `badge badge-${text.toLowerCase()} ${extraClass}`.trim(), text });
}

export function chips(values, muted = false) {
  if (!values || !values.length) return h("span", { class: "muted", text: "—" });
  return values.map((value) => h("span", { class: muted ? "chip chip-muted" : "chip", text: value }));
}

export function link(href, text, attrs = {}) {
  return h("a", { href, ...attrs }, text);
}

export function table(columns, rows, { caption, empty: emptyText = "Nothing yet.", rowAttrs } = {}) {
  if (!rows.length) return empty(emptyText);
  const head = h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col", class: c.num ? "num" : undefined, text: c.label }))));
  const body = h(
    "tbody",
    {},
    rows.map((row) =>
      h(
        "tr",
        rowAttrs ? rowAttrs(row) : {},
        columns.map((c) => h("td", { class: [c.num ? "num" : "", c.class || ""].join(" ").trim() || undefined }, c.render(row))),
      ),
    ),
  );
  return h("div", { class: "table-wrap" }, h("table", {}, caption ? h("caption", { text: caption }) : null, head, body));
}

export function kv(pairs) {
  const list = h("dl", { class: "kv" });
  for (const [key, value] of pairs) {
    if (value === undefined) continue;
    list.append(h("dt", { text: key }), h("dd", {}, value === null || value === "" ? "—" : value));
  }
  return list;
}

/** Short key/value pairs on one wrapping line (version metadata, policies). */
export function kvInline(pairs) {
  const list = h("dl", { class: "kv-inline" });
  for (const [key, value] of pairs) {
    if (value === undefined) continue;
    list.append(h("div", {}, h("dt", { text: key }), h("dd", {}, value === null || value === "" ? "—" : value)));
  }
  return list;
}

export function stat(label, value, { sub, href, tone } = {}) {
  const body = [h("span", { class: "stat-label", text: label }), h("span", { class: "stat-value", text: value }), sub ? h("span", { class: "stat-sub", text: sub }) : null];
  const cls = `stat${tone ? ` stat-${tone}` : ""}`;
  return href ? h("a", { class: cls, href }, body) : h("div", { class: cls }, body);
}

export function metricCard(label, value, sub) {
  return h("div", { class: "metric-card" }, h("div", { class: "stat-label", text: label }), h("div", { class: "stat-value", text: value }), sub ? h("div", { class: "stat-sub", text: sub }) : null);
}

/** A progress bar for a job: <progress> with step/total, phase and the latest metric. */
export function jobProgress(job, { big = false } = {}) {
  const wrap = h("div", { class: big ? "progress-big" : "", dataset: { jobProgress: job.id } });
  updateJobProgress(wrap, job);
  return wrap;
}

export function progressFraction(job) {
  const p = job.progress || {};
  if (job.status === "SUCCEEDED") return 1;
  if (p.total > 0) return Math.min(1, (p.step || 0) / p.total);
  return 0;
}

export function updateJobProgress(wrap, job) {
  const p = job.progress || {};
  const total = p.total > 0 ? p.total : 1;
  const step = job.status === "SUCCEEDED" && !(p.total > 0) ? 1 : Math.min(p.step || 0, total);
  const bar = h("progress", {
    max: total,
    value: step,
    class: job.status === "SUCCEEDED" ? "done" : job.status === "FAILED" ? "bad" : undefined,
    "aria-label": `Progress of job ${shortId(job.id)}`,
    dataset: { step: String(p.step ?? 0), total: String(p.total ?? 0) },
  });
  const parts = [];
  if (p.total > 0) parts.push(`${fmtNumber(p.step || 0)} / ${fmtNumber(p.total)}`);
  else if (job.status === "SUCCEEDED") parts.push("done");
  else if (job.status === "QUEUED") parts.push("waiting for a worker");
  if (job.status === "FAILED" || job.status === "CANCELLED") parts.push(p.total > 0 ? `stopped (${job.status.toLowerCase()})` : job.status.toLowerCase());
  if (p.phase && job.status === "RUNNING") parts.push(p.phase);
  const metrics = p.metrics || {};
  if (metrics.dev_metric !== undefined) parts.push(`dev ${fmtNumber(metrics.dev_metric, 3)}`);
  else if (metrics.loss !== undefined) parts.push(`loss ${fmtNumber(metrics.loss, 3)}`);
  if (job.status === "RUNNING" && p.eta_seconds) parts.push(`ETA ${fmtSeconds(p.eta_seconds)}`);
  const line = h(
    "div",
    { class: "progress-line" },
    job.status === "RUNNING" ? h("span", { class: "live-dot", title: "live", "aria-hidden": "true" }) : null,
    bar,
  );
  wrap.replaceChildren(line, h("div", { class: "progress-text", text: parts.join(" · ") || "—" }));
}

/** A bordered callout paragraph. */
export function callout(text, warn = false) {
  return h("p", { class: warn ? "callout callout-warn" : "callout", text });
}

export function methodOf(job) {
  return (job.params && job.params.method) || "";
}

export function jobLabel(job) {
  const method = methodOf(job);
  return method ? `${job.kind} · ${method}` : job.kind;
}
