// Jobs as tables with live progress (server-sent events) and the admins' cancel/retry buttons.

import { JobStreams, isAdmin, post, seg } from "./api.js";
import { badge, duration, h, jobLabel, jobProgress, link, shortId, showError, table, time, updateJobProgress } from "./ui.js";

export const ACTIVE = new Set(["QUEUED", "RUNNING"]);
export const RETRYABLE = new Set(["FAILED", "CANCELLED"]);

/** Cancel and retry buttons (admins only; the API refuses weaker keys anyway). */
export function jobActions(job, onChanged) {
  if (!isAdmin()) return null;
  const buttons = [];
  const act = (verb) => async (event) => {
    const button = event.currentTarget;
    button.disabled = true;
    try {
      const updated = await post(`/v1/jobs/${seg(job.id)}/${verb}`);
      onChanged(updated);
    } catch (error) {
      showError(error);
      button.disabled = false;
    }
  };
  if (ACTIVE.has(job.status) && !job.cancel_requested) {
    buttons.push(h("button", { type: "button", class: "button button-small button-danger", "data-action": "cancel", "aria-label": `Cancel job ${shortId(job.id)}`, onclick: act("cancel") }, "Cancel"));
  }
  if (RETRYABLE.has(job.status)) {
    buttons.push(h("button", { type: "button", class: "button button-small", "data-action": "retry", "aria-label": `Retry job ${shortId(job.id)}`, onclick: act("retry") }, "Retry"));
  }
  return buttons.length ? h("div", { class: "actions" }, buttons) : h("span", { class: "muted", text: job.cancel_requested && ACTIVE.has(job.status) ? "stopping…" : "—" });
}

function roleOf(job) {
  const key = job.campaign_key || "";
  if (key.startsWith("recycle:")) return key.split(":").pop();
  return job.params && job.params.method ? job.params.method : "";
}

/**
 * A live table of jobs. ``refresh()`` reloads the list; rows of QUEUED/RUNNING jobs follow
 * their server-sent events and update in place (no reload); a final event triggers onFinished.
 */
export class LiveJobsTable {
  constructor(container, { showCampaign = true, onFinished } = {}) {
    this.container = container;
    this.showCampaign = showCampaign;
    this.onFinished = onFinished;
    this.jobs = new Map();
    this.streams = new JobStreams((type, snapshot) => this.onEvent(type, snapshot), 3);
  }

  columns() {
    const columns = [
      { label: "Job", render: (j) => link(`/dashboard/jobs/${j.id}`, shortId(j.id), { class: "mono" }) },
      { label: "Kind", render: (j) => h("span", {}, j.kind, roleOf(j) ? h("span", { class: "chip chip-muted", text: roleOf(j) }) : null) },
      { label: "Status", render: (j) => h("span", { "data-job-status": j.id }, badge(j.status)) },
      { label: "Progress", class: "progress-cell", render: (j) => jobProgress(j) },
      { label: "Attempts", num: true, render: (j) => `${j.attempts}/${j.max_attempts}` },
      { label: "Duration", render: (j) => h("span", { "data-job-duration": j.id, text: duration(j.started_at, j.finished_at) }) },
    ];
    if (this.showCampaign) columns.push({ label: "Campaign", render: (j) => (j.campaign_id ? link(`/dashboard/campaigns/${j.campaign_id}`, shortId(j.campaign_id), { class: "mono" }) : "—") });
    columns.push({ label: "Created", render: (j) => time(j.created_at, true) });
    if (isAdmin()) columns.push({ label: "Actions", render: (j) => h("span", { "data-job-actions": j.id }, jobActions(j, (updated) => this.onChanged(updated))) });
    return columns;
  }

  render(jobs, emptyText = "No jobs yet.") {
    this.jobs = new Map(jobs.map((job) => [job.id, job]));
    const focus = this.focusedControl();
    this.container.replaceChildren(table(this.columns(), jobs, { empty: emptyText, rowAttrs: (j) => ({ "data-job-row": j.id }) }));
    this.restoreFocus(focus);
    this.container.removeAttribute("aria-busy");
    this.streams.sync(jobs.filter((job) => ACTIVE.has(job.status)).sort((a, b) => (a.status === "RUNNING" ? -1 : 1) - (b.status === "RUNNING" ? -1 : 1)).map((job) => job.id));
  }

  /** Which link or button of which row has the keyboard focus (redraws put it back). */
  focusedControl() {
    const active = document.activeElement;
    if (!active || !this.container.contains(active)) return null;
    const row = active.closest("[data-job-row]");
    if (!row) return null;
    return { row: row.dataset.jobRow, action: active.dataset.action, href: active.getAttribute("href") };
  }

  restoreFocus(focus) {
    if (!focus) return;
    const row = this.container.querySelector(`[data-job-row="${CSS.escape(focus.row)}"]`);
    if (!row) return;
    const selector = focus.action ? `[data-action="${focus.action}"]` : focus.href ? `a[href="${CSS.escape(focus.href)}"]` : null;
    const target = selector ? row.querySelector(selector) : null;
    if (target) target.focus();
  }

  onChanged(updated) {
    this.update(updated);
    if (this.onFinished) this.onFinished(updated);
  }

  update(snapshot) {
    const before = this.jobs.get(snapshot.id) || {};
    const job = { ...before, ...snapshot };
    this.jobs.set(job.id, job);
    const progress = this.container.querySelector(`[data-job-progress="${CSS.escape(job.id)}"]`);
    if (progress) updateJobProgress(progress, job);
    // Status and buttons change only with the state: a focused button keeps its focus.
    if (before.status !== job.status || before.cancel_requested !== job.cancel_requested) {
      const status = this.container.querySelector(`[data-job-status="${CSS.escape(job.id)}"]`);
      if (status) status.replaceChildren(badge(job.status));
      const actions = this.container.querySelector(`[data-job-actions="${CSS.escape(job.id)}"]`);
      if (actions) actions.replaceChildren(jobActions(job, (updated) => this.onChanged(updated)) || "");
    }
    if (ACTIVE.has(job.status)) this.streams.sync([...this.jobs.values()].filter((j) => ACTIVE.has(j.status)).map((j) => j.id));
  }

  onEvent(type, snapshot) {
    this.update(snapshot);
    if (type === "status" && this.onFinished) this.onFinished(snapshot);
  }

  get activeCount() {
    return [...this.jobs.values()].filter((job) => ACTIVE.has(job.status)).length;
  }
}
