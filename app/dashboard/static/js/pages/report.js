// One report: the plots of its kind and how the run went.

import { get, seg } from "../api.js";
import { reportSections } from "../reportviews.js";
import { $, fill, h, link, shortId, time } from "../ui.js";

export default async function report({ report: id }) {
  const row = await get(`/v1/reports/${seg(id)}`);
  const doc = row.document;
  const method = doc.method && doc.method !== doc.kind ? ` · ${doc.method}` : "";
  const title = `${doc.kind[0].toUpperCase()}${doc.kind.slice(1)} report${method}`;
  $("report-title").textContent = title;
  document.title = `${title} · Adapter recycling`;
  if (row.job_id) fill("crumb-job", link(`/dashboard/jobs/${row.job_id}`, `Job ${shortId(row.job_id)}`), " / ");
  fill(
    "report-meta",
    h("span", { class: "mono", text: shortId(row.id) }),
    h("span", { text: `schema ${row.schema_version}` }),
    h("span", {}, "created ", time(row.created_at)),
    row.job_id ? h("span", {}, "job ", link(`/dashboard/jobs/${row.job_id}`, shortId(row.job_id), { class: "mono" })) : null,
  );
  $("download-json").addEventListener("click", () => {
    const blob = new Blob([JSON.stringify(doc, null, 2)], { type: "application/json" });
    const anchor = h("a", { href: URL.createObjectURL(blob), download: `report-${row.id}.json` });
    document.body.append(anchor);
    anchor.click();
    anchor.remove();
  });
  fill("report-body", reportSections(doc));
}
