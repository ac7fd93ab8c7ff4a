// A campaign's report: per adapter, compatibility, each method's convergence against fresh with
// the target line, the interpolation path with its barrier, and the attention-similarity map.

import { canSubmit, get, post, seg } from "../api.js";
import { BASELINE, PALETTE } from "../plots.js";
import { card, compatibilityCards, convergencePlot, interpolationPlots, scoresPlot, similarityPlot } from "../reportviews.js";
import { $, badge, callout, clearError, fill, fmtNumber, h, jobProgress, link, shortId, showError, table } from "../ui.js";

const REFRESH_MS = 6000;

async function reportOf(job) {
  if (!job || !job.result_report_id) return null;
  return (await get(`/v1/reports/${seg(job.result_report_id)}`)).document;
}

function compatibilitySection(entry, compatReport, recycleRuns) {
  const c = compatReport && compatReport.metrics.compatibility;
  if (!c) return card("Compatibility", null, h("p", { class: "empty", text: entry.compatibility && entry.compatibility.status === "FAILED" ? `The compatibility check failed: ${entry.compatibility.error || ""}` : "The compatibility check has not finished yet." }));
  const items = [
    { label: "old model + adapter", value: c.source, color: BASELINE },
    { label: "new model, as is", value: c.direct, color: "#94a3b8" },
  ];
  let colour = 0;
  for (const run of recycleRuns) {
    if (run.test === null || run.test === undefined) continue;
    items.push({ label: run.fresh ? "fresh on new model" : `${run.name} on new model`, value: run.test, color: run.fresh ? "#64748b" : PALETTE[colour++ % PALETTE.length] });
  }
  const decision = entry.decision === "direct" ? "Retention was high enough: the old adapter was promoted on the new version as is." : entry.decision === "recycle" ? "Retention was below the policy's gate, so the adapter was recycled." : null;
  return card(
    "Compatibility",
    `The outdated adapter on the upgraded model (${c.metric_name}, ${c.split} split)`,
    h("div", { class: "split split-even" }, h("div", {}, compatibilityCards(c), decision ? callout(decision) : null), scoresPlot(items, { name: "campaign-scores", title: `Test ${c.metric_name} by approach` })),
  );
}

function convergenceSection(entry, runs) {
  const withCurves = runs.filter((run) => run.points.length);
  if (!withCurves.length) return card("Convergence", null, h("p", { class: "empty", text: entry.decision === "direct" ? "No recycling run: the adapter was promoted as is." : "No recycling run has finished yet." }));
  const targetRun = Object.values(entry.methods || {}).find((m) => m.target !== undefined && m.target !== null);
  const target = targetRun ? { value: targetRun.target, label: `target ${fmtNumber(targetRun.target, 3)} (${targetRun.target_source === "fresh" ? "99% of fresh best" : targetRun.target_source})` } : null;
  const speed = withCurves
    .filter((run) => !run.fresh && (run.speedup || run.stepsToTarget === 0))
    .map((run) => (run.stepsToTarget === 0 ? `${run.name} starts above the target: no training needed to match fresh` : `${run.name} reaches the target ${fmtNumber(run.speedup, 2)}× faster than fresh`));
  const summary = table(
    [
      { label: "Method", render: (run) => (run.fresh ? "fresh (baseline)" : run.name) },
      { label: "Steps to target", num: true, render: (run) => (run.stepsToTarget === null || run.stepsToTarget === undefined ? "not reached" : run.stepsToTarget === 0 ? "0 (from the start)" : fmtNumber(run.stepsToTarget)) },
      { label: "Speedup", num: true, render: (run) => (run.fresh ? "baseline" : run.stepsToTarget === 0 ? "immediate" : run.speedup ? `${fmtNumber(run.speedup, 2)}×` : "—") },
      { label: "Test", num: true, render: (run) => fmtNumber(run.test, 3) },
    ],
    withCurves,
    { caption: target ? `Target: ${target.label}` : undefined },
  );
  return card(
    "Convergence",
    "Dev metric of each recycling method against tuning from scratch (fresh, dashed)",
    speed.length ? callout(`${speed.join("; ")}.`) : null,
    h("div", { class: "split" }, convergencePlot(withCurves, target, { name: "campaign-convergence" }), summary),
  );
}

async function similaritySection(entry, similarityJobs, refresh) {
  const best = entry.best && entry.best.adapter_id;
  if (!best) return card("Functional similarity", null, h("p", { class: "empty", text: "Needs a recycled adapter to compare with." }));
  const matching = similarityJobs.filter((job) => job.params.old_adapter_id === entry.adapter_id && job.params.new_adapter_id === best);
  const done = matching.find((job) => job.status === "SUCCEEDED");
  const subtitle = `Attention heads of the old adapted model and the recycled one (${entry.best.method}) on the same inputs`;
  if (done) {
    const doc = await reportOf(done);
    if (doc && doc.metrics.similarity) return card("Functional similarity", subtitle, similarityPlot(doc.metrics.similarity, { name: "campaign-similarity" }), h("p", { class: "muted" }, "From ", link(`/dashboard/jobs/${done.id}`, `similarity job ${shortId(done.id)}`), "."));
  }
  const active = matching.find((job) => job.status === "QUEUED" || job.status === "RUNNING");
  if (active) return card("Functional similarity", subtitle, h("p", {}, "Similarity analysis ", link(`/dashboard/jobs/${active.id}`, shortId(active.id), { class: "mono" }), " is ", badge(active.status)), jobProgress(active));
  const button = canSubmit()
    ? h(
        "button",
        {
          type: "button",
          class: "button button-primary",
          id: "run-similarity",
          onclick: async (event) => {
            event.currentTarget.disabled = true;
            try {
              await post("/v1/jobs", { kind: "similarity", params: { old_adapter_id: entry.adapter_id, new_adapter_id: best } });
              refresh();
            } catch (error) {
              showError(error);
            }
          },
        },
        "Run attention-similarity analysis",
      )
    : null;
  return card("Functional similarity", subtitle, h("p", { class: "empty", text: "No similarity analysis of this pair yet." }), button);
}

async function adapterSection(entry, jobsByKey, similarityJobs, refresh) {
  const compatJob = jobsByKey.get(`compatibility:${entry.adapter_id}`);
  const interpJob = jobsByKey.get(`interpolation:${entry.adapter_id}`);
  const recycleJobs = [...jobsByKey.entries()].filter(([key]) => key.startsWith(`recycle:${entry.adapter_id}:`)).map(([, job]) => job);
  const [compatReport, interpReport, ...recycleReports] = await Promise.all([reportOf(compatJob), reportOf(interpJob), ...recycleJobs.map(reportOf)]);
  const runs = recycleJobs.map((job, i) => {
    const method = job.campaign_key.split(":").pop();
    const summary = (entry.methods || {})[method] || {};
    const doc = recycleReports[i];
    const points = doc && doc.curve ? doc.curve.points.map((p) => [p.step, p.metric]) : [];
    const fresh = method === "fresh";
    const label = fresh ? "fresh (from scratch)" : summary.steps_to_target === 0 ? `${method} · at target from the start` : summary.speedup ? `${method} · ${fmtNumber(summary.speedup, 2)}× faster` : method;
    return { name: method, label, fresh, points, stepsToTarget: summary.steps_to_target ?? (points.length ? null : undefined), speedup: summary.speedup, test: summary.test };
  });
  runs.sort((a, b) => Number(a.fresh) - Number(b.fresh));
  const interp = interpReport && interpReport.metrics.interpolation;
  const sections = [
    h(
      "div",
      { class: "section-title" },
      h("h2", { text: `Task ${entry.task || "?"}` }),
      h("span", { class: "mono muted", text: `adapter ${shortId(entry.adapter_id)}` }),
      badge(entry.outcome),
      entry.promotion ? h("span", {}, h("span", { class: "chip", text: entry.promotion.alias }), ` → ${shortId(entry.promotion.adapter_id)} (${entry.promotion.method})`) : null,
    ),
    entry.error ? callout(entry.error, true) : null,
    compatibilitySection(entry, compatReport, runs),
    convergenceSection(entry, runs),
    interp
      ? card("Linear mode connectivity", `From the old adapted model (α=0) to the recycled one (α=1), ${interp.mode} mode`, interpolationPlots(interp, { idPrefix: "campaign-interpolation" }))
      : card("Linear mode connectivity", null, h("p", { class: "empty", text: interpJob ? `The interpolation job is ${interpJob.status.toLowerCase()}.` : "No interpolation: it runs after recycling." })),
    await similaritySection(entry, similarityJobs, refresh),
  ];
  return h("div", { class: "stack", "data-adapter-report": entry.adapter_id }, sections);
}

export default async function campaignReport({ campaign: id }) {
  let timer = null;
  const refresh = async () => {
    try {
      const [c, similarity] = await Promise.all([get(`/v1/campaigns/${seg(id)}`), get("/v1/jobs", { kind: "similarity", limit: 200 })]);
      clearError();
      const title = `Report · ${c.model} v${c.from_version} → v${c.to_version}`;
      $("report-title").textContent = title;
      document.title = `${title} · Adapter recycling`;
      fill("report-meta", badge(c.status), h("span", {}, "campaign ", link(`/dashboard/campaigns/${c.id}`, shortId(c.id), { class: "mono" })), h("span", { text: `methods ${(c.policy.methods || []).join(", ")}${c.policy.fresh_baseline ? " + fresh baseline" : ""}` }));
      const jobsByKey = new Map(c.jobs.filter((job) => job.campaign_key).map((job) => [job.campaign_key, job]));
      const entries = Object.values((c.summary || {}).adapters || {});
      const running = c.status === "RUNNING" || c.status === "PENDING";
      const sections = await Promise.all(entries.map((entry) => adapterSection(entry, jobsByKey, similarity.items, refresh)));
      const activeSimilarity = similarity.items.some((job) => job.status === "QUEUED" || job.status === "RUNNING");
      fill("report-body", running ? callout("The campaign is still running: the plots fill in as its jobs finish.") : null, sections.length ? sections : h("p", { class: "empty", text: "No adapters in this campaign yet." }));
      if ((running || activeSimilarity) && !timer) timer = setInterval(refresh, REFRESH_MS);
      if (!running && !activeSimilarity && timer) {
        clearInterval(timer);
        timer = null;
      }
    } catch (error) {
      showError(error);
    }
  };
  await refresh();
}
