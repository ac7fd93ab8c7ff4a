// One campaign: totals, per-adapter outcome, policy, and its jobs with live progress.

import { get, seg } from "../api.js";
import { LiveJobsTable } from "../jobviews.js";
import { $, badge, chips, clearError, duration, fill, fmtNumber, fmtPercent, h, kvInline, link, shortId, showError, stat, table, time } from "../ui.js";

const REFRESH_MS = 5000;

function methodsCell(entry) {
  const methods = Object.entries(entry.methods || {});
  if (!methods.length) return h("span", { class: "muted", text: entry.decision === "direct" ? "not needed" : "—" });
  return h(
    "div",
    { class: "stack-tight" },
    methods.map(([name, m]) =>
      h(
        "div",
        {},
        h("span", { class: name === (entry.best || {}).method ? "chip" : "chip chip-muted", text: name }),
        " ",
        m.test !== undefined && m.test !== null ? `test ${fmtNumber(m.test, 3)}` : m.status.toLowerCase(),
        name === "fresh" ? h("span", { class: "muted", text: " · baseline" }) : m.steps_to_target === 0 ? h("span", { class: "muted", text: " · at target from the start" }) : m.speedup ? h("span", { class: "muted", text: ` · ${fmtNumber(m.speedup, 2)}× faster` }) : null,
      ),
    ),
  );
}

function adaptersTable(summary) {
  const entries = Object.values(summary.adapters || {});
  return table(
    [
      { label: "Task", render: (e) => h("span", {}, h("strong", { text: e.task || "?" }), " ", h("span", { class: "mono muted", text: shortId(e.adapter_id) })) },
      {
        label: "Compatibility",
        render: (e) => {
          const c = e.compatibility || {};
          if (c.retention === undefined) return c.status ? badge(c.status) : "—";
          return h("span", {}, `retention ${fmtPercent(c.retention)}`, h("br"), h("span", { class: "muted", text: `${fmtNumber(c.direct, 3)} on new vs ${fmtNumber(c.source, 3)} on old` }));
        },
      },
      { label: "Methods", render: methodsCell },
      {
        label: "Promotion",
        render: (e) => (e.promotion ? h("span", {}, h("span", { class: "chip", text: e.promotion.alias }), " → ", h("span", { class: "mono", text: shortId(e.promotion.adapter_id) }), h("span", { class: "muted", text: ` (${e.promotion.method})` })) : e.gates && !e.gates.passed ? h("span", { class: "muted", text: (e.gates.reasons || []).join("; ") }) : "—"),
      },
      {
        label: "Interpolation",
        render: (e) => {
          const i = e.interpolation || {};
          if (i.loss_barrier === undefined) return i.status ? badge(i.status) : "—";
          return h("span", {}, i.connected ? "connected" : "not connected", h("br"), h("span", { class: "muted", text: `loss barrier ${fmtNumber(i.loss_barrier, 3)} · accuracy barrier ${fmtNumber(i.accuracy_barrier, 3)}` }));
        },
      },
      { label: "Outcome", render: (e) => h("span", {}, badge(e.outcome), e.error ? h("div", { class: "muted", text: e.error }) : null) },
    ],
    entries,
    { empty: "The campaign has not looked at its adapters yet." },
  );
}

function policyView(policy) {
  const gates = policy.gates || {};
  return kvInline([
    ["Methods", chips(policy.methods || [])],
    ["Fresh baseline", policy.fresh_baseline ? "yes" : "no"],
    ["Step budget", fmtNumber(policy.step_budget)],
    ["Few-shot", policy.few_shot ? `${policy.few_shot} per class` : "all training data"],
    ["Promote as is when retention ≥", gates.direct_min_retention === null || gates.direct_min_retention === undefined ? "never" : fmtPercent(gates.direct_min_retention, 0)],
    ["Recycled must reach", gates.recycled_min_metric ?? "—"],
    ["Must beat fresh", gates.must_beat_fresh ? "yes" : "no"],
    ["Training overrides", Object.keys(policy.training || {}).length ? chips(Object.entries(policy.training).map(([k, v]) => `${k}=${v}`), true) : "—"],
  ]);
}

export default async function campaign({ campaign: id }) {
  const jobs = new LiveJobsTable($("campaign-jobs"), { showCampaign: false, onFinished: () => schedule(300) });
  let timer = null;
  let pending = null;
  const refresh = async () => {
    try {
      const c = await get(`/v1/campaigns/${seg(id)}`);
      clearError();
      const title = `Campaign ${shortId(c.id)} · ${c.model} v${c.from_version} → v${c.to_version}`;
      $("campaign-title").textContent = title;
      $("crumb").textContent = `Campaign ${shortId(c.id)}`;
      document.title = `${title} · Adapter recycling`;
      fill(
        "campaign-meta",
        badge(c.status),
        h("span", {}, "model ", link(`/dashboard/models/${encodeURIComponent(c.model)}`, c.model)),
        h("span", { text: `trigger ${c.trigger}` }),
        h("span", {}, "started ", time(c.started_at || c.created_at, true)),
        h("span", { text: `duration ${duration(c.started_at, c.finished_at)}` }),
      );
      const totals = (c.summary && c.summary.totals) || {};
      const active = c.jobs.filter((j) => j.status === "RUNNING" || j.status === "QUEUED").length;
      fill(
        "campaign-totals",
        stat("Adapters", fmtNumber(totals.adapters ?? (c.policy.adapter_ids || []).length)),
        stat("Done", fmtNumber(totals.done ?? 0)),
        stat("Promoted", fmtNumber(totals.promoted ?? 0), { tone: totals.promoted ? "good" : undefined }),
        stat("Failed", fmtNumber(totals.failed ?? 0), { tone: totals.failed ? "bad" : undefined }),
        stat("Jobs", fmtNumber(c.jobs.length), { sub: active ? `${active} queued or running` : "none active" }),
      );
      fill("campaign-adapters", adaptersTable(c.summary || {}));
      fill("campaign-policy", policyView(c.policy || {}));
      jobs.render(c.jobs, "No jobs yet.");
      const running = c.status === "RUNNING" || c.status === "PENDING";
      $("live-note").textContent = running ? "Progress of running jobs is streamed live." : `Finished ${c.finished_at ? new Date(c.finished_at).toLocaleString("en-GB") : ""}.`;
      if (running && !timer) timer = setInterval(refresh, REFRESH_MS);
      if (!running && timer) {
        clearInterval(timer);
        timer = null;
      }
    } catch (error) {
      showError(error);
    }
  };
  const schedule = (ms) => {
    if (pending) return;
    pending = setTimeout(() => {
      pending = null;
      refresh();
    }, ms);
  };
  await refresh();
}
