// One job: live progress and convergence curve (server-sent events), details, parameters, result.

import { followJob, get, seg } from "../api.js";
import { ACTIVE, jobActions } from "../jobviews.js";
import { lineChart } from "../plots.js";
import { $, badge, chips, clearError, duration, fill, fmtBytes, fmtNumber, fmtSeconds, h, jobLabel, jobProgress, kv, link, shortId, showError, time, updateJobProgress } from "../ui.js";

const LABELS = {
  adapter_id: "Adapter",
  old_adapter_id: "Old adapter",
  new_adapter_id: "New adapter",
  to_version_id: "Target version id",
  from_version_id: "Source version id",
  model_version_id: "Model version id",
  task_id: "Task id",
};

function label(key) {
  const text = LABELS[key] || key.replaceAll("_", " ");
  return text[0].toUpperCase() + text.slice(1);
}

function value(v) {
  if (v === null || v === undefined || v === "") return "—";
  if (Array.isArray(v)) return v.length ? chips(v.map(String), true) : "—";
  if (typeof v === "object") return kv(Object.entries(v).map(([k, inner]) => [label(k), value(inner)]));
  if (typeof v === "number") return fmtNumber(v, 6);
  return String(v);
}

function paramsView(params) {
  return kv(Object.entries(params).map(([key, v]) => [label(key), value(v)]));
}

function curve(job) {
  const points = ((job.progress || {}).eval_points || []).map((p) => [p.step, p.metric]);
  if (points.length < 1) return h("p", { class: "empty", text: job.status === "SUCCEEDED" || job.kind === "compatibility" ? "This job records no training curve." : "The dev-metric curve appears with the first evaluation." });
  const total = (job.progress || {}).total;
  return lineChart({
    name: "job-convergence",
    title: "Dev metric during training",
    description: `${points.length} evaluations`,
    xLabel: "training step",
    yLabel: "dev metric",
    series: [{ name: job.params.method || job.kind, points }],
    // The curve fills the chart (the progress bar shows how far the run is overall).
    xDomain: [0, Math.max(...points.map((p) => p[0])) || total || 1],
    table: false,
  });
}

export default async function jobPage({ job: id }) {
  let job = await get(`/v1/jobs/${seg(id)}`);
  const progress = jobProgress(job, { big: true });
  progress.id = "job-progress-live";

  let shownState = null;
  const renderLive = () => {
    updateJobProgress(progress, job);
    const p = job.progress || {};
    const evals = p.eval_points || [];
    const best = evals.length ? evals.reduce((a, b) => (b.metric > a.metric ? b : a)) : null;
    fill("job-progress-panel", progress);
    fill(
      "job-curve",
      h(
        "div",
        { class: "split" },
        curve(job),
        kv([
          ["Phase", p.phase || (job.status === "QUEUED" ? "waiting for a worker" : "—")],
          ["Step", p.total ? `${fmtNumber(p.step || 0)} of ${fmtNumber(p.total)}` : "—"],
          ["Time left", job.status === "RUNNING" && p.eta_seconds ? fmtSeconds(p.eta_seconds) : "—"],
          ...Object.entries(p.metrics || {}).map(([k, v]) => [label(k), fmtNumber(v, 4)]),
          ["Best dev metric", best ? `${fmtNumber(best.metric, 3)} at step ${best.step}` : "—"],
          ["Evaluations", fmtNumber(evals.length)],
          p.resumed_from_step ? ["Resumed", `from the checkpoint at step ${p.resumed_from_step}`] : ["Resumed", undefined],
          p.retried_from ? ["Retried after", `${p.retried_from.status.toLowerCase()}: ${p.retried_from.error_code || ""} ${p.retried_from.error_message || ""}`] : ["Retried after", undefined],
        ]),
      ),
    );
  };

  // Everything with links and buttons is redrawn only when the job changes state, so the
  // keyboard focus is not lost to the stream of progress events.
  const renderState = () => {
    const title = `Job ${shortId(job.id)} · ${jobLabel(job)}`;
    $("job-title").textContent = title;
    document.title = `${title} · Adapter recycling`;
    fill(
      "job-meta",
      h("span", { id: "job-status" }, badge(job.status)),
      h("span", { text: `queue ${job.queue}` }),
      job.campaign_id ? h("span", {}, "campaign ", link(`/dashboard/campaigns/${job.campaign_id}`, shortId(job.campaign_id), { class: "mono" })) : null,
      h("span", { text: `attempt ${job.attempts} of ${job.max_attempts}` }),
    );
    fill("job-actions", jobActions(job, (updated) => {
      job = updated;
      render();
      follow();
    }));
    fill(
      "job-details",
      kv([
        ["Kind", job.kind],
        ["Status", badge(job.status)],
        ["Worker", job.worker ? h("code", { text: job.worker }) : "—"],
        ["Created", time(job.created_at)],
        ["Started", time(job.started_at)],
        ["Finished", time(job.finished_at)],
        ["Run time", duration(job.started_at, job.finished_at)],
        ["Campaign role", job.campaign_key ? h("code", { text: job.campaign_key }) : "—"],
      ]),
    );
    fill("job-params", paramsView(job.params || {}));
    const cost = job.cost || {};
    const result = [];
    if (job.error_code) result.push(h("div", { class: "error-box", role: "note" }, h("strong", { text: job.error_code }), h("br"), h("code", { text: job.error_message || "" })));
    result.push(
      kv([
        ["Adapter", job.result_adapter_id ? h("code", { text: job.result_adapter_id }) : "—"],
        ["Report", job.result_report_id ? link(`/dashboard/reports/${job.result_report_id}`, `Open report ${shortId(job.result_report_id)}`) : "—"],
        ["Device time", cost.device_seconds !== undefined ? fmtSeconds(cost.device_seconds) : "—"],
        ["Wall time", cost.wall_seconds !== undefined ? fmtSeconds(cost.wall_seconds) : "—"],
        ["Tokens", cost.tokens !== undefined ? fmtNumber(cost.tokens) : "—"],
        ["Peak memory", cost.peak_memory_bytes ? fmtBytes(cost.peak_memory_bytes) : "—"],
      ]),
    );
    fill("job-result", result);
  };

  const render = () => {
    clearError();
    const state = `${job.status}|${job.attempts}|${job.cancel_requested}|${job.worker}`;
    if (state !== shownState) {
      shownState = state;
      renderState();
    }
    renderLive();
  };

  let following = false;
  const follow = () => {
    if (following || !ACTIVE.has(job.status)) return;
    following = true;
    followJob(job.id, async (type, snapshot) => {
      job = { ...job, ...snapshot };
      if (type === "status") job = await get(`/v1/jobs/${seg(id)}`).catch(() => job);
      render();
    }).finally(() => {
      following = false;
    });
  };
  render();
  follow();
  // The stream covers a running job; this catches a queued job picked up later, or a retry.
  setInterval(async () => {
    if (following) return;
    try {
      const fresh = await get(`/v1/jobs/${seg(id)}`);
      if (fresh.status !== job.status || fresh.attempts !== job.attempts) {
        job = fresh;
        render();
      }
      follow();
    } catch (error) {
      showError(error);
    }
  }, 5000);
}
