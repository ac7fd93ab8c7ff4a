// A model: the lineage graph of its versions and, per version, its adapters.

import { get, seg } from "../api.js";
import { lineageGraph } from "../plots.js";
import { badge, chips, fill, fmtBytes, fmtNumber, h, kvInline, link, shortId, table, time } from "../ui.js";

function score(adapter) {
  const m = adapter.metrics || {};
  const test = m.test || {};
  const value = test.accuracy ?? test.exact_match ?? m.direct ?? null;
  return value === null ? "—" : fmtNumber(value, 3);
}

function lineage(adapter, byId) {
  if (!adapter.recycled_from) return h("span", { class: "muted", text: adapter.method === "train" ? "trained here" : "uploaded" });
  const source = byId.get(adapter.recycled_from);
  return h(
    "span",
    {},
    h("span", { class: "chip", text: adapter.method || "recycled" }),
    " from ",
    h("a", { href: source ? `#version-${source.model_version}` : "#", class: "mono", text: shortId(adapter.recycled_from) }),
    source ? h("span", { class: "muted", text: ` (v${source.model_version})` }) : null,
  );
}

function adaptersTable(adapters, byId) {
  return table(
    [
      { label: "Adapter", render: (a) => h("span", {}, h("strong", { text: a.name || "unnamed" }), " ", h("span", { class: "mono muted", text: shortId(a.id) })) },
      { label: "Task", render: (a) => a.task },
      { label: "Type", render: (a) => h("code", { text: a.peft_type }) },
      { label: "Status", render: (a) => badge(a.status) },
      { label: "Aliases", render: (a) => chips(a.aliases) },
      { label: "Lineage", render: (a) => lineage(a, byId) },
      { label: "Test metric", num: true, render: (a) => score(a) },
      { label: "Size", num: true, render: (a) => fmtBytes(a.size_bytes) },
      { label: "Created", render: (a) => time(a.created_at, true) },
    ],
    adapters,
    { empty: "No adapters on this version.", rowAttrs: (a) => ({ "data-adapter": a.id }) },
  );
}

export default async function model({ model: name }) {
  const [model, versions, adapters, campaigns] = await Promise.all([
    get(`/v1/models/${seg(name)}`),
    get(`/v1/models/${seg(name)}/versions`, { limit: 500 }),
    get("/v1/adapters", { model: name, limit: 500 }),
    get("/v1/campaigns", { model: name, limit: 20 }),
  ]);
  fill(
    "model-meta",
    model.description ? h("span", { text: model.description }) : null,
    h("span", {}, "latest ready ", h("strong", { text: model.latest_version ? `v${model.latest_version}` : "—" })),
    chips(Object.entries(model.aliases).map(([alias, version]) => `${alias} → v${version}`)),
  );

  const byIdAll = new Map(adapters.items.map((a) => [a.id, a]));
  const perVersion = new Map();
  for (const adapter of adapters.items) {
    if (!perVersion.has(adapter.model_version)) perVersion.set(adapter.model_version, []);
    perVersion.get(adapter.model_version).push(adapter);
  }
  const sorted = [...versions.items].sort((a, b) => a.version - b.version);
  const nodes = sorted.map((v) => {
    const count = (perVersion.get(v.version) || []).length;
    const ready = (perVersion.get(v.version) || []).filter((a) => a.status === "READY").length;
    return {
      id: v.version,
      parent: v.parent_version,
      label: `v${v.version}`,
      status: v.status,
      href: `#version-${v.version}`,
      aria: `Version ${v.version}, ${v.status}, ${count} adapters${v.aliases.length ? `, aliases ${v.aliases.join(", ")}` : ""}`,
      lines: [`${v.status.toLowerCase()} · ${ready}/${count} adapters ready`, v.aliases.length ? `@ ${v.aliases.join(", ")}` : v.parent_version ? `upgrade of v${v.parent_version}` : "base version"],
    };
  });
  const serving = adapters.items
    .filter((a) => a.aliases.includes("production"))
    .sort((a, b) => b.model_version - a.model_version || a.task.localeCompare(b.task));
  const servingTable = table(
    [
      { label: "Version", render: (a) => h("a", { href: `#version-${a.model_version}`, text: `v${a.model_version}` }) },
      { label: "Task", render: (a) => a.task },
      { label: "Adapter", render: (a) => h("span", {}, a.name || shortId(a.id), " ", h("span", { class: "mono muted", text: shortId(a.id) })) },
      { label: "Made by", render: (a) => (a.recycled_from ? `${a.method} from v${(byIdAll.get(a.recycled_from) || {}).model_version ?? "?"}` : a.method === "train" ? "training" : "upload") },
      { label: "Test", num: true, render: (a) => score(a) },
    ],
    serving,
    { caption: "Adapters serving each task (alias production)", empty: "No adapter has the production alias yet." },
  );
  fill(
    "lineage",
    nodes.length ? h("div", { class: "split" }, lineageGraph({ name: "lineage", title: `Versions of ${name}`, nodes }), servingTable) : h("p", { class: "empty", text: "No versions yet." }),
  );

  fill(
    "model-campaigns",
    table(
      [
        { label: "Campaign", render: (c) => link(`/dashboard/campaigns/${c.id}`, shortId(c.id), { class: "mono" }) },
        { label: "Upgrade", render: (c) => `v${c.from_version} → v${c.to_version}` },
        { label: "Status", render: (c) => badge(c.status) },
        { label: "Trigger", render: (c) => c.trigger },
        { label: "Started", render: (c) => time(c.started_at || c.created_at, true) },
      ],
      campaigns.items,
      { empty: "No campaign yet: register an upgrade with its parent version to start one." },
    ),
  );

  const byId = new Map(adapters.items.map((a) => [a.id, a]));
  const sections = [...sorted].reverse().map((v) =>
    h(
      "section",
      { class: "card", id: `version-${v.version}`, tabindex: "-1", "aria-labelledby": `version-${v.version}-title`, "data-version": v.version },
      h("div", { class: "section-title" }, h("h3", { id: `version-${v.version}-title`, text: `Version ${v.version}` }), badge(v.status), v.aliases.length ? chips(v.aliases) : null, v.description ? h("span", { class: "muted", text: v.description }) : null),
      kvInline([
        ["Parent", v.parent_version ? `v${v.parent_version}` : "— (base version)"],
        ["Model class", v.model_class ? h("code", { text: v.model_class }) : "—"],
        ["Fingerprint", v.fingerprint ? h("code", { text: v.fingerprint.slice(0, 16), title: v.fingerprint }) : "—"],
        ["Size", fmtBytes(v.size_bytes)],
        ["Tags", Object.keys(v.tags).length ? chips(Object.entries(v.tags).map(([k, val]) => `${k}=${val}`), true) : "—"],
        ["Registered", time(v.created_at)],
      ]),
      h("h4", { class: "visually-hidden", text: `Adapters on version ${v.version}` }),
      adaptersTable(perVersion.get(v.version) || [], byId),
    ),
  );
  fill("versions", sections.length ? sections : h("p", { class: "empty", text: "No versions yet." }));
}
