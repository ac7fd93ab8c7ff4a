// Models: every registered model with its latest version and aliases.

import { get } from "../api.js";
import { chips, fill, h, link, table, time } from "../ui.js";

export default async function models() {
  const page = await get("/v1/models", { limit: 500 });
  fill(
    "models",
    table(
      [
        { label: "Model", render: (m) => link(`/dashboard/models/${encodeURIComponent(m.name)}`, m.name) },
        { label: "Description", class: "wrap", render: (m) => m.description || h("span", { class: "muted", text: "—" }) },
        { label: "Latest ready", num: true, render: (m) => (m.latest_version ? `v${m.latest_version}` : "—") },
        { label: "Aliases", render: (m) => chips(Object.entries(m.aliases).map(([alias, version]) => `${alias} → v${version}`)) },
        { label: "Registered", render: (m) => time(m.created_at) },
      ],
      page.items,
      { empty: "No models yet. Register one with: recycle models create NAME" },
    ),
  );
}
