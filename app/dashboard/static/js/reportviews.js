// Report views shared by the report page and the campaign report: the plots of DESIGN §6.

import { BASELINE, PALETTE, barChart, heatmap, lineChart } from "./plots.js";
import { callout, fmtBytes, fmtNumber, fmtPercent, fmtSeconds, h, kv, metricCard, table } from "./ui.js";

export function card(title, subtitle, ...body) {
  return h("section", { class: "card" }, h("h2", { text: title }), subtitle ? h("p", { class: "card-sub", text: subtitle }) : null, body);
}

function argmaxGap(alphas, values, sign) {
  // The α where the curve is furthest above (sign 1: loss) or below (sign -1: accuracy) the chord.
  const n = alphas.length;
  const a0 = alphas[0];
  const a1 = alphas[n - 1];
  let best = { index: 0, gap: -Infinity, chord: values[0] };
  for (let i = 0; i < n; i += 1) {
    const t = (alphas[i] - a0) / (a1 - a0 || 1);
    const chord = (1 - t) * values[0] + t * values[n - 1];
    const gap = sign * (values[i] - chord);
    if (gap > best.gap) best = { index: i, gap, chord };
  }
  return best;
}

/** Loss and task metric against α, the straight chord between the ends, the barrier marked. */
export function interpolationPlots(metrics, { idPrefix = "interpolation" } = {}) {
  const alphas = metrics.alphas;
  const loss = argmaxGap(alphas, metrics.losses, 1);
  const acc = argmaxGap(alphas, metrics.metrics, -1);
  const chord = (values) => [
    [alphas[0], values[0]],
    [alphas[alphas.length - 1], values[values.length - 1]],
  ];
  const lossChart = lineChart({
    name: `${idPrefix}-loss`,
    title: "Loss along the path",
    description: `Loss at ${alphas.length} points from α=0 (old model and adapter) to α=1 (new); loss barrier ${fmtNumber(metrics.loss_barrier, 4)}`,
    xLabel: "α (0 = old model + old adapter, 1 = new model + recycled adapter)",
    yLabel: "loss",
    series: [
      { name: "loss", points: alphas.map((a, i) => [a, metrics.losses[i]]), color: PALETTE[0] },
      { name: "straight line between the ends", points: chord(metrics.losses), color: BASELINE, dashed: true, markers: false, width: 1.5 },
    ],
    vMarks: loss.gap > 1e-9 ? [{ x: alphas[loss.index], y1: metrics.losses[loss.index], y2: loss.chord, label: `loss barrier ${fmtNumber(metrics.loss_barrier, 3)}` }] : [],
    xDomain: [0, 1],
  });
  const accChart = lineChart({
    name: `${idPrefix}-metric`,
    title: `${metrics.metric_name} along the path`,
    description: `${metrics.metric_name} at ${alphas.length} points; accuracy barrier ${fmtNumber(metrics.accuracy_barrier, 4)}`,
    xLabel: "α (0 = old model + old adapter, 1 = new model + recycled adapter)",
    yLabel: metrics.metric_name,
    series: [
      { name: metrics.metric_name, points: alphas.map((a, i) => [a, metrics.metrics[i]]), color: PALETTE[2] },
      { name: "straight line between the ends", points: chord(metrics.metrics), color: BASELINE, dashed: true, markers: false, width: 1.5 },
    ],
    vMarks: acc.gap > 1e-9 ? [{ x: alphas[acc.index], y1: metrics.metrics[acc.index], y2: acc.chord, label: `barrier ${fmtNumber(metrics.accuracy_barrier, 3)}` }] : [],
    xDomain: [0, 1],
  });
  const verdict = metrics.connected
    ? `Linearly connected: the ${metrics.metric_name} barrier (${fmtNumber(metrics.accuracy_barrier, 3)}) is at most 0.02, so every point on the straight path is about as good as its ends.`
    : `Not linearly connected: the ${metrics.metric_name} barrier (${fmtNumber(metrics.accuracy_barrier, 3)}) is above 0.02; the path between the two adapted models crosses a region of worse ${metrics.metric_name}.`;
  return [
    callout(verdict, !metrics.connected),
    h("div", { class: "grid-2" }, lossChart, accChart),
    h("p", { class: "muted", text: `Mode ${metrics.mode} (${metrics.mode === "model" ? "whole merged parameters" : "adapter updates on the new model"}), ${alphas.length} points on the ${metrics.split} split.` }),
  ];
}

/** The layers × heads attention-similarity heat map with its mean and the chance level. */
export function similarityPlot(similarity, { name = "similarity" } = {}) {
  const layers = similarity.matrix.length;
  const heads = Math.max(...similarity.matrix.map((row) => row.length));
  // The colour scale starts at the tenth below the lowest value (or the chance level), so that
  // heads that differ show it; the legend says where it starts.
  const lowest = Math.min(similarity.chance_level, ...similarity.matrix.flat());
  const min = Math.max(0, Math.min(0.9, Math.floor(lowest * 10) / 10));
  return h("div", { class: "split split-even" }, [
    h(
      "div",
      { class: "metric-cards" },
      metricCard("Mean similarity", fmtNumber(similarity.mean, 3), "matching heads"),
      metricCard("Chance level", fmtNumber(similarity.chance_level, 3), "mismatched head pairs"),
      metricCard("Above chance", fmtNumber(similarity.mean - similarity.chance_level, 3)),
      metricCard("Probe inputs", fmtNumber(similarity.n_probes)),
    ),
    heatmap({
      name,
      title: `Attention similarity, ${layers} layers × ${heads} heads`,
      description: `Cosine similarity of each head's attention maps in the old and the recycled model; mean ${fmtNumber(similarity.mean, 3)}, chance ${fmtNumber(similarity.chance_level, 3)}`,
      matrix: similarity.matrix,
      min,
      max: 1,
      marks: [
        { label: "chance", value: similarity.chance_level },
        { label: "mean", value: similarity.mean },
      ],
      caption: `Darker = the head attends the same way in both models (cosine similarity; the scale runs from ${fmtNumber(min, 1)} to 1). Compare with the chance level of mismatched heads.`,
    }),
  ]);
}

/** Source vs direct (and recovery) of an outdated adapter on the upgraded model. */
export function compatibilityCards(c) {
  return h(
    "div",
    { class: "metric-cards" },
    metricCard(`Old model (${c.metric_name})`, fmtNumber(c.source, 3), "old adapter on its own base"),
    metricCard("New model, as is", fmtNumber(c.direct, 3), "no training"),
    metricCard("Retention", fmtPercent(c.retention), "new ÷ old"),
    metricCard("Negative flips", fmtPercent(c.negative_flip_rate), "right before, wrong now"),
    metricCard("Agreement", fmtPercent(c.agreement), "same predictions"),
    c.recovery !== null && c.recovery !== undefined ? metricCard("Recovery", fmtPercent(c.recovery), "vs fresh tuning") : metricCard("Majority floor", fmtNumber(c.floor, 3)),
  );
}

/**
 * Dev metric against step for several runs. runs: [{name, points: [[step, metric]], fresh,
 * stepsToTarget}]; target: {value, label}.
 */
export function convergencePlot(runs, target, { name = "convergence", title = "Convergence: dev metric against training step" } = {}) {
  let colour = 0;
  const series = runs.map((run) => ({
    name: run.label || run.name,
    points: run.points,
    color: run.fresh ? BASELINE : PALETTE[colour++ % PALETTE.length],
    dashed: Boolean(run.fresh),
  }));
  const dots = [];
  const reached = (run) => run.stepsToTarget !== undefined && run.stepsToTarget !== null;
  if (target) {
    runs.forEach((run, i) => {
      if (reached(run)) dots.push({ x: run.stepsToTarget, y: target.value, color: series[i].color, label: `${run.name} reaches the target at step ${run.stepsToTarget}` });
    });
  }
  const parts = runs
    .filter((run) => run.stepsToTarget !== undefined)
    .map((run) => (!reached(run) ? `${run.name} never reaches it` : run.stepsToTarget === 0 ? `${run.name} is above it from the start` : `${run.name} reaches it at step ${run.stepsToTarget}`));
  return lineChart({
    name,
    title,
    description: `${runs.length} runs${target ? `; target ${fmtNumber(target.value, 3)}` : ""}`,
    xLabel: "training step",
    yLabel: "dev metric",
    series,
    hLines: target ? [{ y: target.value, label: target.label || `target ${fmtNumber(target.value, 3)}` }] : [],
    dots,
    caption: target ? `The dashed green line is the target (${target.label || fmtNumber(target.value, 3)}); ${parts.join("; ")}.` : undefined,
  });
}

/** Test scores of the approaches side by side: old model, new model as is, each method. */
export function scoresPlot(items, { name = "scores", title = "Test score by approach" } = {}) {
  const max = Math.max(1, ...items.map((i) => i.value || 0));
  return barChart({ name, title, description: items.map((i) => `${i.label} ${fmtNumber(i.value, 3)}`).join(", "), items, max: max > 1 ? max : 1 });
}

function scoreCards(metrics) {
  const cards = [];
  for (const split of ["test", "dev"]) {
    const score = metrics[split];
    if (!score) continue;
    if (score.accuracy !== null && score.accuracy !== undefined) cards.push(metricCard(`${split} accuracy`, fmtNumber(score.accuracy, 3), `n=${score.n}`));
    if (score.macro_f1 !== null && score.macro_f1 !== undefined) cards.push(metricCard(`${split} macro-F1`, fmtNumber(score.macro_f1, 3)));
    if (score.exact_match !== null && score.exact_match !== undefined) cards.push(metricCard(`${split} exact match`, fmtNumber(score.exact_match, 3)));
    cards.push(metricCard(`${split} loss`, fmtNumber(score.loss, 4)));
  }
  return cards.length ? h("div", { class: "metric-cards" }, cards) : null;
}

/** Everything a single report shows, by its kind. */
export function reportSections(doc) {
  const sections = [];
  const m = doc.metrics || {};
  const scores = scoreCards(m);
  if (scores) sections.push(card("Scores", `${doc.kind}${doc.method ? ` · ${doc.method}` : ""}`, scores));
  if (m.compatibility) {
    const c = m.compatibility;
    sections.push(
      card(
        "Compatibility",
        `The outdated adapter on the upgraded model, ${c.split} split, no training`,
        h("div", { class: "split split-even" }, compatibilityCards(c), scoresPlot(
          [
            { label: "old model + adapter", value: c.source, color: BASELINE },
            { label: "new model, as is", value: c.direct, color: PALETTE[0] },
          ].concat(c.fresh !== null && c.fresh !== undefined ? [{ label: "fresh on new", value: c.fresh, color: PALETTE[1] }] : []),
          { name: "compatibility-scores" },
        )),
      ),
    );
  }
  if (doc.curve && doc.curve.points && doc.curve.points.length) {
    const conv = m.convergence;
    const run = { name: doc.method || doc.kind, points: doc.curve.points.map((p) => [p.step, p.metric]), stepsToTarget: conv ? conv.steps_to_target : undefined };
    const charts = [convergencePlot([run], conv ? { value: conv.target, label: `target ${fmtNumber(conv.target, 3)} (${conv.target_source})` } : null)];
    if (doc.curve.train_loss && doc.curve.train_loss.length) {
      charts.push(
        lineChart({ name: "train-loss", title: "Training loss", xLabel: "training step", yLabel: "loss", series: [{ name: "train loss", points: doc.curve.train_loss, color: PALETTE[1], markers: false }], table: false }),
      );
    }
    const cards = conv
      ? h(
          "div",
          { class: "metric-cards" },
          metricCard("Steps to target", conv.steps_to_target === null || conv.steps_to_target === undefined ? "not reached" : fmtNumber(conv.steps_to_target)),
          metricCard("Fresh steps to target", conv.fresh_steps_to_target ? fmtNumber(conv.fresh_steps_to_target) : "—"),
          metricCard("Speedup", conv.speedup ? `${fmtNumber(conv.speedup, 2)}×` : "—"),
          metricCard("Best dev", fmtNumber(doc.curve.best_metric, 3), doc.curve.best_step ? `at step ${doc.curve.best_step}` : undefined),
        )
      : null;
    sections.push(card("Convergence", `${doc.curve.metric_name} on the dev split every ${doc.curve.eval_every} steps`, cards, h("div", { class: "grid-2" }, charts)));
  }
  if (m.interpolation) sections.push(card("Linear mode connectivity", "Interpolating between the old adapted model and the new one", interpolationPlots(m.interpolation)));
  if (m.similarity) sections.push(card("Functional similarity", "Attention patterns of corresponding heads on the same inputs", similarityPlot(m.similarity)));
  if (m.weight_distance) {
    const w = m.weight_distance;
    sections.push(card("Weight distance", "How far the upgrade moved the base model", h("div", { class: "metric-cards" }, metricCard("Relative L2", fmtNumber(w.relative_l2, 4)), metricCard("Cosine", fmtNumber(w.cosine, 4)))));
  }
  sections.push(runDetails(doc));
  return sections;
}

function runDetails(doc) {
  const cost = doc.cost || {};
  const hyper = Object.entries(doc.hyperparameters || {});
  return card(
    "How it ran",
    "Enough to reproduce the run",
    h(
      "div",
      { class: "grid-2" },
      h(
        "div",
        {},
        h("h3", { text: "Run" }),
        kv([
          ["Kind", doc.kind],
          ["Method", doc.method || "—"],
          ["Adapter type", doc.peft_type || "—"],
          ["Seed", doc.seed ?? "—"],
          ["Device", doc.hardware ? `${doc.hardware.device} (${doc.hardware.device_name})` : "—"],
          ["Wall time", fmtSeconds(cost.wall_seconds)],
          ["Device time", fmtSeconds(cost.device_seconds)],
          ["Tokens", fmtNumber(cost.tokens)],
          ["Peak memory", cost.peak_memory_bytes ? fmtBytes(cost.peak_memory_bytes) : "—"],
          ["Libraries", Object.entries(doc.library_versions || {}).map(([k, v]) => `${k} ${v}`).join(", ") || "—"],
        ]),
      ),
      h("div", {}, h("h3", { text: "Hyperparameters" }), hyper.length ? kv(hyper.map(([k, v]) => [k.replaceAll("_", " "), typeof v === "object" && v !== null ? JSON.stringify(v) : String(v)])) : h("p", { class: "empty", text: "None recorded." })),
    ),
    h("h3", { text: "Inputs (sha256)" }),
    table(
      [
        { label: "Role", render: (f) => f.role },
        { label: "Fingerprint", render: (f) => h("code", { text: f.sha256.slice(0, 24), title: f.sha256 }) },
        { label: "Files", num: true, render: (f) => fmtNumber(Object.keys(f.files || {}).length) },
      ],
      doc.fingerprints || [],
      { empty: "No fingerprints recorded." },
    ),
  );
}
