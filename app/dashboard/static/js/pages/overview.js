// Overview: counts, jobs by status, queue depth, workers and recent failures (GET /v1/admin/overview).

import { get } from "../api.js";
import { stackedBar } from "../plots.js";
import { $, badge, clearError, fill, fmtAgo, fmtNumber, h, jobProgress, link, shortId, showError, stat, table, time } from "../ui.js";

const REFRESH_MS = 4000;
const STATUSES = ["QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"];

function counts(data) {
  const c = data.counts;
  const adapters = data.adapters_by_status || {};
  const campaigns = data.campaigns_by_status || {};
  const running = (campaigns.RUNNING || 0) + (campaigns.PENDING || 0);
  const jobsActive = (data.jobs_by_status.RUNNING || 0) + (data.jobs_by_status.QUEUED || 0);
  return [
    stat("Models", fmtNumber(c.models), { href: "/dashboard/models", sub: `${fmtNumber(c.versions)} versions` }),
    stat("Adapters", fmtNumber(c.adapters), { sub: `${fmtNumber(adapters.READY || 0)} ready` }),
    stat("Tasks", fmtNumber(c.tasks), { sub: `${fmtNumber(c.reports)} reports` }),
    stat("Campaigns", fmtNumber(c.campaigns), { href: "/dashboard/campaigns", sub: running ? `${running} running` : "none running" }),
    stat("Jobs", fmtNumber(c.jobs), { href: "/dashboard/jobs", sub: jobsActive ? `${jobsActive} queued or running` : "all idle" }),
    stat("Failed jobs", fmtNumber(data.jobs_by_status.FAILED || 0), { href: "/dashboard/jobs?status=FAILED", tone: data.jobs_by_status.FAILED ? "bad" : "good", sub: "all time" }),
  ];
}

function jobsByKind(data) {
  const kinds = Object.keys(data.jobs_by_kind);
  const rows = kinds.map((kind) => ({ kind, ...data.jobs_by_kind[kind] }));
  return table(
    [{ label: "Kind", render: (r) => link(`/dashboard/jobs?kind=${r.kind}`, r.kind) }].concat(STATUSES.map((status) => ({ label: status.toLowerCase(), num: true, render: (r) => fmtNumber(r[status] || 0) }))),
    rows,
  );
}

function queues(data) {
  return table(
    [
      { label: "Queue", render: (q) => h("code", { text: q.name }) },
      { label: "Waiting in broker", num: true, render: (q) => (q.depth === null ? "unknown" : fmtNumber(q.depth)) },
      { label: "Queued jobs", num: true, render: (q) => fmtNumber(q.queued_jobs) },
      { label: "Running jobs", num: true, render: (q) => fmtNumber(q.running_jobs) },
    ],
    data.queues,
    { rowAttrs: (q) => ({ "data-queue": q.name }) },
  );
}

function broker(data) {
  const b = data.broker;
  return h(
    "p",
    { class: "meta-row" },
    h("span", {}, "Broker ", h("code", { text: b.transport })),
    badge(b.ok ? "ok" : "down"),
    b.error ? h("span", { class: "muted", text: b.error }) : null,
  );
}

function workers(data) {
  return table(
    [
      { label: "Worker", render: (w) => h("code", { text: w.name }) },
      { label: "State", render: (w) => badge(w.state) },
      { label: "Last heartbeat", render: (w) => (w.last_heartbeat_at ? time(w.last_heartbeat_at, true) : w.answered_broker ? "answered now" : "—") },
      {
        label: "Running",
        class: "progress-cell",
        render: (w) =>
          w.running.length
            ? w.running.map((job) => h("div", { class: "stack-tight" }, link(`/dashboard/jobs/${job.id}`, `${job.kind} ${shortId(job.id)}`), jobProgress({ ...job, status: job.status })))
            : h("span", { class: "muted", text: "idle" }),
      },
    ],
    data.workers,
    { empty: "No worker has reported in the last hour. Start one with: recycle worker" },
  );
}

function failures(data) {
  return table(
    [
      { label: "Job", render: (f) => link(`/dashboard/jobs/${f.id}`, shortId(f.id), { class: "mono" }) },
      { label: "Kind", render: (f) => f.kind },
      { label: "Error", render: (f) => h("code", { text: f.error_code || "—" }) },
      { label: "Message", class: "wrap", render: (f) => (f.error_message || "").slice(0, 220) },
      { label: "Campaign", render: (f) => (f.campaign_id ? link(`/dashboard/campaigns/${f.campaign_id}`, shortId(f.campaign_id), { class: "mono" }) : "—") },
      { label: "Finished", render: (f) => time(f.finished_at, true) },
    ],
    data.recent_failures,
    { empty: "No failed jobs. " },
  );
}

function render(data) {
  fill("counts", counts(data));
  fill("jobs-status", stackedBar({ name: "jobs-by-status", title: "Jobs by status", counts: data.jobs_by_status, order: STATUSES }));
  fill("jobs-kind", jobsByKind(data));
  fill("campaigns-status", stackedBar({ name: "campaigns-by-status", title: "Campaigns by status", counts: data.campaigns_by_status, order: ["PENDING", "RUNNING", "SUCCEEDED", "PARTIAL", "FAILED", "CANCELLED"] }));
  fill("broker", broker(data));
  fill("queues", queues(data));
  fill("workers", workers(data));
  fill("failures", failures(data));
  $("updated").textContent = `Updated ${fmtAgo(data.generated_at)}; refreshes every ${REFRESH_MS / 1000} s`;
}

export default async function overview() {
  const refresh = async () => {
    try {
      render(await get("/v1/admin/overview"));
      clearError();
    } catch (error) {
      showError(error);
    }
  };
  await refresh();
  setInterval(refresh, REFRESH_MS);
}
