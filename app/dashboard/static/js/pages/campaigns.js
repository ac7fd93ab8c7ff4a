// Campaigns: every upgrade campaign with its progress (refreshed while any runs).

import { get } from "../api.js";
import { badge, clearError, duration, fill, h, link, shortId, showError, table, time } from "../ui.js";

const REFRESH_MS = 4000;

function progressOf(c) {
  const totals = (c.summary && c.summary.totals) || {};
  const total = totals.adapters || (c.policy.adapter_ids || []).length || 0;
  const done = totals.done || 0;
  return h(
    "div",
    { class: "progress-line" },
    h("progress", { max: Math.max(total, 1), value: done, class: c.status === "SUCCEEDED" ? "done" : c.status === "FAILED" ? "bad" : undefined, "aria-label": `Adapters done in campaign ${shortId(c.id)}` }),
    h("span", { class: "progress-text", text: `${done}/${total} adapters` }),
  );
}

function render(items) {
  fill(
    "campaigns",
    table(
      [
        { label: "Campaign", render: (c) => link(`/dashboard/campaigns/${c.id}`, shortId(c.id), { class: "mono" }) },
        { label: "Model", render: (c) => link(`/dashboard/models/${encodeURIComponent(c.model)}`, c.model) },
        { label: "Upgrade", render: (c) => `v${c.from_version} → v${c.to_version}` },
        { label: "Status", render: (c) => badge(c.status) },
        { label: "Progress", class: "progress-cell", render: progressOf },
        { label: "Promoted", num: true, render: (c) => String(((c.summary || {}).totals || {}).promoted ?? 0) },
        { label: "Methods", render: (c) => (c.policy.methods || []).join(", ") + (c.policy.fresh_baseline ? " + fresh" : "") },
        { label: "Trigger", render: (c) => c.trigger },
        { label: "Started", render: (c) => time(c.started_at || c.created_at, true) },
        { label: "Duration", render: (c) => duration(c.started_at, c.finished_at) },
      ],
      items,
      { empty: "No campaigns yet. Register an upgraded version with its parent, or run: recycle campaigns start", rowAttrs: (c) => ({ "data-campaign": c.id }) },
    ),
  );
}

export default async function campaigns() {
  let timer = null;
  const refresh = async () => {
    try {
      const page = await get("/v1/campaigns", { limit: 100 });
      render(page.items);
      clearError();
      const running = page.items.some((c) => c.status === "RUNNING" || c.status === "PENDING");
      if (running && !timer) timer = setInterval(refresh, REFRESH_MS);
      if (!running && timer) {
        clearInterval(timer);
        timer = null;
      }
    } catch (error) {
      showError(error);
    }
  };
  await refresh();
}
