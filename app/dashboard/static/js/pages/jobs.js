// Jobs: filter by status and kind, page through them; running jobs update live.

import { get } from "../api.js";
import { LiveJobsTable } from "../jobviews.js";
import { $, clearError, h, showError } from "../ui.js";

const PAGE_SIZE = 25;
const REFRESH_MS = 5000;

export default async function jobs() {
  const params = new URLSearchParams(location.search);
  const status = $("filter-status");
  const kind = $("filter-kind");
  status.value = params.get("status") || "";
  kind.value = params.get("kind") || "";
  let offset = Number(params.get("offset") || 0);
  const live = new LiveJobsTable($("jobs"), { onFinished: () => setTimeout(refresh, 300) });

  async function refresh() {
    try {
      const page = await get("/v1/jobs", { status: status.value, kind: kind.value, limit: PAGE_SIZE, offset });
      clearError();
      live.render(page.items, status.value || kind.value ? "No job matches these filters." : "No jobs yet.");
      const pager = $("pager");
      const first = page.total ? offset + 1 : 0;
      const last = Math.min(offset + PAGE_SIZE, page.total);
      pager.replaceChildren(
        h("span", { text: `${first}–${last} of ${page.total}` }),
        h("button", { type: "button", class: "button button-small", disabled: offset === 0, onclick: () => move(-PAGE_SIZE) }, "Newer"),
        h("button", { type: "button", class: "button button-small", disabled: last >= page.total, onclick: () => move(PAGE_SIZE) }, "Older"),
      );
    } catch (error) {
      showError(error);
    }
  }

  function syncUrl() {
    const query = new URLSearchParams();
    if (status.value) query.set("status", status.value);
    if (kind.value) query.set("kind", kind.value);
    if (offset) query.set("offset", String(offset));
    history.replaceState(null, "", `${location.pathname}${query.toString() ? `?${query}` : ""}`);
  }

  function move(delta) {
    offset = Math.max(0, offset + delta);
    syncUrl();
    refresh();
  }

  for (const select of [status, kind]) {
    select.addEventListener("change", () => {
      offset = 0;
      syncUrl();
      refresh();
    });
  }
  $("job-filters").addEventListener("submit", (event) => event.preventDefault());
  await refresh();
  setInterval(() => {
    if (live.activeCount || !document.hidden) refresh();
  }, REFRESH_MS);
}
