"""From the service's report documents to flat records, per-seed aggregates, tables and claims.

Every record keeps the ids that make it traceable: the report id, the job id (and campaign id when
a campaign ran the job) and the sha256 of every model, adapter and dataset split the report lists.
Nothing here talks to the service: the runner fetches the reports (``GET /v1/reports/{id}``) and
hands their ``document`` in, so the same code works on reports the library writes directly
(tests/bench does that).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from bench.profiles import FEW_SHOT_METHODS, HOPS, TASKS
from recycling_core.metrics.convergence import convergence_metrics, default_target, steps_to_target

Record = dict[str, Any]

REGIME_FULL = "full"
REGIME_FEW = "few"


# --------------------------------------------------------------------------- records


def fingerprints_of(document: dict[str, Any]) -> dict[str, str]:
    """role → sha256 of every input the report lists (models, adapters, dataset splits)."""
    return {item["role"]: item["sha256"] for item in document.get("fingerprints", [])}


def _score(score: dict[str, Any] | None) -> dict[str, Any]:
    if not score:
        return {}
    return {k: score.get(k) for k in ("accuracy", "macro_f1", "loss", "floor", "n")}


def _curve(document: dict[str, Any]) -> dict[str, Any] | None:
    curve = document.get("curve")
    if not curve:
        return None
    return {
        "steps": [p["step"] for p in curve.get("points", [])],
        "dev": [p["metric"] for p in curve.get("points", [])],
        "dev_loss": [p["loss"] for p in curve.get("points", [])],
        "best_step": curve.get("best_step"),
        "best_metric": curve.get("best_metric"),
    }


def metrics_of(document: dict[str, Any]) -> dict[str, Any]:
    """The numbers of one report that the benchmark uses, by report kind."""
    kind = document["kind"]
    metrics = document.get("metrics") or {}
    out: dict[str, Any] = {}
    if metrics.get("test"):
        out["test"] = _score(metrics["test"])
    if metrics.get("dev"):
        out["dev"] = _score(metrics["dev"])
    if metrics.get("compatibility"):
        c = metrics["compatibility"]
        out["compatibility"] = {
            k: c.get(k) for k in ("source", "direct", "retention", "negative_flip_rate", "agreement", "floor", "split")
        }
    if metrics.get("weight_distance"):
        w = metrics["weight_distance"]
        out["weight_distance"] = {"relative_l2": w["relative_l2"], "cosine": w["cosine"]}
    if metrics.get("convergence"):
        out["convergence_in_report"] = dict(metrics["convergence"])
    if metrics.get("interpolation"):
        i = metrics["interpolation"]
        out["interpolation"] = {
            k: i.get(k)
            for k in ("mode", "split", "alphas", "losses", "metrics", "loss_barrier", "accuracy_barrier", "connected")
        }
    if metrics.get("similarity"):
        s = metrics["similarity"]
        out["similarity"] = {k: s.get(k) for k in ("matrix", "mean", "chance_level", "n_probes")}
    curve = _curve(document)
    if curve is not None:
        out["curve"] = curve
    if kind in ("train", "recycle"):
        out["train_examples"] = (document.get("output") or {}).get("train_examples")
    return out


def make_record(
    context: dict[str, Any],
    document: dict[str, Any],
    *,
    job_id: str | None = None,
    report_id: str | None = None,
    campaign_id: str | None = None,
    extra: dict[str, Any] | None = None,
) -> Record:
    """One record: where it belongs (context), the ids, the fingerprints and the metrics."""
    record: Record = {
        "peft": context.get("peft", "lora"),
        "task": context["task"],
        "hop": context.get("hop"),
        "seed": context.get("seed", 0),
        "regime": context.get("regime"),
        "role": context["role"],
        "kind": document["kind"],
        "method": document.get("method"),
        "report_id": report_id or document.get("report_id"),
        "document_report_id": document.get("report_id"),
        "job_id": job_id or document.get("job_id"),
        "campaign_id": campaign_id,
        "fingerprints": fingerprints_of(document),
        "hyperparameters": {
            k: v
            for k, v in (document.get("hyperparameters") or {}).items()
            if k in ("steps", "learning_rate", "batch_size", "eval_every", "max_length", "seed", "mode", "points", "probes")
        },
        "cost": document.get("cost"),
        "metrics": metrics_of(document),
    }
    if extra:
        record.update(extra)
    return record


# --------------------------------------------------------------------------- convergence vs fresh


def add_convergence(records: list[Record]) -> None:
    """Steps to target and speedup of every trained method against its own fresh run.

    The same functions and default target as the service's campaign summary (99% of the fresh
    run's best dev metric), plus a stricter target: the fresh run's best dev metric itself.
    """
    groups: dict[tuple, dict[str, Record]] = defaultdict(dict)
    for record in records:
        if record["regime"] in (REGIME_FULL, REGIME_FEW) and "curve" in record["metrics"]:
            key = (record["peft"], record["task"], record["hop"], record["seed"], record["regime"])
            groups[key][record["role"]] = record
    for runs in groups.values():
        fresh = runs.get("fresh")
        if fresh is None or fresh["metrics"]["curve"]["best_metric"] is None:
            continue
        best = fresh["metrics"]["curve"]["best_metric"]
        fresh_points = list(zip(fresh["metrics"]["curve"]["steps"], fresh["metrics"]["curve"]["dev"]))
        for name, fraction in (("target99", 0.99), ("target100", 1.0)):
            target, _ = default_target(fresh_best=best, fraction=fraction)
            fresh_steps = steps_to_target(fresh_points, target)
            for record in runs.values():
                points = list(zip(record["metrics"]["curve"]["steps"], record["metrics"]["curve"]["dev"]))
                conv = convergence_metrics(points, target, "fresh", fresh_steps)
                record["metrics"].setdefault("vs_fresh", {})[name] = conv.model_dump()


# --------------------------------------------------------------------------- aggregation


def mean_spread(values: Sequence[float | None]) -> dict[str, Any]:
    """Mean and sample standard deviation over seeds (None values are counted, not averaged)."""
    present = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    result: dict[str, Any] = {"n": len(values), "n_present": len(present), "values": list(values)}
    if present:
        result["mean"] = statistics.fmean(present)
        result["std"] = statistics.stdev(present) if len(present) > 1 else 0.0
    else:
        result["mean"] = None
        result["std"] = None
    return result


def _get(record: Record, path: str) -> Any:
    value: Any = record["metrics"]
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


FIELDS = {
    "test": "test.accuracy",
    "test_f1": "test.macro_f1",
    "source": "compatibility.source",
    "direct": "compatibility.direct",
    "retention": "compatibility.retention",
    "negative_flip_rate": "compatibility.negative_flip_rate",
    "agreement": "compatibility.agreement",
    "floor": "compatibility.floor",
    "relative_l2": "weight_distance.relative_l2",
    "steps99": "vs_fresh.target99.steps_to_target",
    "speedup99": "vs_fresh.target99.speedup",
    "steps100": "vs_fresh.target100.steps_to_target",
    "speedup100": "vs_fresh.target100.speedup",
    "loss_barrier": "interpolation.loss_barrier",
    "accuracy_barrier": "interpolation.accuracy_barrier",
    "similarity": "similarity.mean",
    "chance": "similarity.chance_level",
}


def aggregate(records: Iterable[Record]) -> dict[str, dict[str, Any]]:
    """``peft/task/hop/regime/role`` → field → mean and spread over seeds."""
    groups: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        groups[group_key(record)].append(record)
    out: dict[str, dict[str, Any]] = {}
    for key, members in sorted(groups.items()):
        members = sorted(members, key=lambda r: r["seed"])
        fields = {}
        for name, path in FIELDS.items():
            values = [_get(r, path) for r in members]
            if any(v is not None for v in values):
                fields[name] = mean_spread(values)
        interp = [r["metrics"].get("interpolation") for r in members if r["metrics"].get("interpolation")]
        if interp:
            fields["alphas"] = interp[0]["alphas"]
            for series in ("losses", "metrics"):
                columns = list(zip(*[i[series] for i in interp]))
                fields[f"interp_{series}"] = [statistics.fmean(c) for c in columns]
            fields["connected"] = [i["connected"] for i in interp]
        fields["seeds"] = [r["seed"] for r in members]
        fields["report_ids"] = [r["report_id"] for r in members]
        fields["job_ids"] = [r["job_id"] for r in members]
        out[key] = fields
    return out


def group_key(record: Record) -> str:
    return "/".join(str(record.get(k)) for k in ("peft", "task", "hop", "regime", "role"))


# --------------------------------------------------------------------------- formatting


def fmt(stat: dict[str, Any] | None, digits: int = 3, percent: bool = False) -> str:
    """``mean ± std`` over seeds (just the value for one seed); ``—`` when missing."""
    if not stat or stat.get("mean") is None:
        return "—"
    scale = 100.0 if percent else 1.0
    mean = stat["mean"] * scale
    text = f"{mean:.{digits}f}"
    if stat["n_present"] > 1:
        text += f" ± {stat['std'] * scale:.{digits}f}"
    if stat["n_present"] < stat["n"]:
        text += f" ({stat['n'] - stat['n_present']}/{stat['n']} n.r.)"
    return text


def fmt_steps(stat: dict[str, Any] | None) -> str:
    if not stat:
        return "—"
    if stat["n_present"] == 0:
        return "not reached"
    return fmt(stat, digits=0)


def _speedup(steps: dict[str, Any] | None, speedup: dict[str, Any] | None) -> str:
    if steps and steps.get("n_present") and steps["mean"] == 0:
        return "at step 0"
    if not speedup or speedup.get("mean") is None:
        return "—"
    return fmt(speedup, digits=2) + "×"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _tasks_hops(agg: dict[str, dict[str, Any]], peft: str) -> list[tuple[str, str]]:
    present = {(k.split("/")[1], k.split("/")[2]) for k in agg if k.startswith(peft + "/")}
    ordered = [(t, h) for t in TASKS for h in HOPS if (t, h) in present]
    ordered += sorted(p for p in present if p not in ordered and p[1] != "None")
    return [p for p in ordered if p[1] != "None"]


def lineage_table(lineage: dict[str, Any]) -> str:
    rows = []
    for hop, info in lineage.get("hops", {}).items():
        loss = info.get("mlm_loss", {})
        rows.append(
            [
                hop,
                info.get("corpus", "—"),
                str(info.get("steps", "—")),
                f"{info['relative_l2']:.3f}" if info.get("relative_l2") is not None else "—",
                f"{info['cosine']:.4f}" if info.get("cosine") is not None else "—",
                _loss_pair(loss.get("sotu")),
                _loss_pair(loss.get("spdx")),
            ]
        )
    return _table(
        ["hop", "continual pre-training corpus", "MLM steps", "relative L2 change", "cosine", "held-out MLM loss, SOTU (before → after)", "held-out MLM loss, SPDX (before → after)"],
        rows,
    )


def _loss_pair(pair: dict[str, float] | None) -> str:
    if not pair or pair.get("before") is None or pair.get("after") is None:
        return "—"
    return f"{pair['before']:.2f} → {pair['after']:.2f}"


def markdown_tables(records: list[Record], lineage: dict[str, Any] | None = None) -> str:
    """Every table of the write-up, as Markdown (mean ± sample std over seeds)."""
    agg = aggregate(records)
    seeds = sorted({r["seed"] for r in records})
    parts = [f"Seeds: {', '.join(map(str, seeds))} ({len(seeds)}); values are mean ± sample standard deviation over seeds where there are several. Accuracy on the test split unless said."]
    if lineage:
        parts += ["### Model lineage (the upgrades)", lineage_table(lineage)]
    for peft in ("lora", "full"):
        pairs = _tasks_hops(agg, peft)
        if not pairs:
            continue
        title = "LoRA" if peft == "lora" else "full fine-tuning (task-vector direct / init)"
        g = lambda t, h, regime, role, peft=peft: agg.get(f"{peft}/{t}/{h}/{regime}/{role}", {})
        rows = []
        for t, h in pairs:
            d = g(t, h, "full", "direct")
            rows.append([t, h, fmt(d.get("floor")), fmt(d.get("source")), fmt(d.get("direct")), fmt(d.get("retention")), fmt(d.get("negative_flip_rate")), fmt(d.get("agreement")), fmt(d.get("relative_l2"))])
        parts += [f"### Compatibility, {title}: the outdated adapter on the upgraded model, no training",
                  _table(["task", "hop", "majority floor", "source (old base)", "direct (new base)", "retention", "negative flips", "agreement", "weight change"], rows)]
        rows = []
        for t, h in pairs:
            fr, ini = g(t, h, "full", "fresh"), g(t, h, "full", "init")
            if not fr:
                continue
            rows.append([t, h, fmt(fr.get("test")), fmt(ini.get("test")), fmt_steps(fr.get("steps99")), fmt_steps(ini.get("steps99")), _speedup(ini.get("steps99"), ini.get("speedup99")), fmt_steps(fr.get("steps100")), fmt_steps(ini.get("steps100")), _speedup(ini.get("steps100"), ini.get("speedup100"))])
        if rows:
            parts += [f"### Full data, {title}: fresh vs init",
                      _table(["task", "hop", "fresh test", "init test", "fresh steps to 99% target", "init steps to 99% target", "speedup (99%)", "fresh steps to fresh's best dev", "init steps to fresh's best dev", "speedup (100%)"], rows)]
        rows = []
        for t, h in pairs:
            cells = [g(t, h, "few", m) for m in FEW_SHOT_METHODS]
            if not any(cells):
                continue
            rows.append([t, h, *[fmt(c.get("test")) for c in cells], *[fmt_steps(c.get("steps99")) for c in cells]])
        if rows:
            parts += [f"### Few-shot, {title}: test accuracy and steps to 99% of few-shot fresh's best dev",
                      _table(["task", "hop", *FEW_SHOT_METHODS, *[f"{m} steps" for m in FEW_SHOT_METHODS]], rows)]
        rows = []
        for t, h in pairs:
            for role, label in (("interp_model_fresh", "model, A0 ↔ fresh"), ("interp_adapter_fresh", "adapter, A0 ↔ fresh"), ("interp_model_best_full", "model, A0 ↔ best recycled (campaign)")):
                cell = g(t, h, "analysis", role)
                if not cell:
                    continue
                metrics = cell.get("interp_metrics") or []
                losses = cell.get("interp_losses") or []
                mid = len(metrics) // 2
                acc = " / ".join(f"{metrics[i]:.3f}" for i in (0, mid, len(metrics) - 1)) if metrics else "—"
                loss = " / ".join(f"{losses[i]:.3f}" for i in (0, mid, len(losses) - 1)) if losses else "—"
                connected = cell.get("connected") or []
                rows.append([t, h, label, loss, acc, fmt(cell.get("loss_barrier")), fmt(cell.get("accuracy_barrier")), f"{sum(connected)}/{len(connected)}"])
        if rows:
            parts += [f"### Linear mode connectivity, {title} (test loss and accuracy at α = 0 / 0.5 / 1, mean over seeds)",
                      _table(["task", "hop", "mode and pair", "loss", "accuracy", "loss barrier", "accuracy barrier", "connected (seeds)"], rows)]
        rows = []
        for t, h in pairs:
            fr, ini = g(t, h, "analysis", "similarity_fresh"), g(t, h, "analysis", "similarity_init")
            if not fr and not ini:
                continue
            rows.append([t, h, fmt(fr.get("similarity")), fmt(ini.get("similarity")), fmt(fr.get("chance") or ini.get("chance"))])
        if rows:
            parts += [f"### Attention similarity, {title} (mean cosine of corresponding heads, old adapted model vs new)",
                      _table(["task", "hop", "A0 on old ↔ fresh on new", "A0 on old ↔ init on new", "chance (mismatched heads)"], rows)]
    return "\n\n".join(parts) + "\n"


# --------------------------------------------------------------------------- the paper's claims


def _mean(agg: dict[str, dict[str, Any]], key: str, field: str) -> float | None:
    stat = agg.get(key, {}).get(field)
    return stat.get("mean") if stat else None


def evaluate_claims(records: list[Record], peft: str = "lora", tolerance: float = 0.01) -> dict[str, Any]:
    """Each claim of the paper, checked per task × hop cell on the seed means, with the numbers.

    Criteria (stated in the write-up): compatibility — direct recovers at least half of the
    source adapter's margin over the majority floor; interpolation — model-mode A0 ↔ fresh is
    ``connected`` (accuracy barrier ≤ 0.02); attention — similarity above the chance level;
    init — reaches the 99% target in no more steps than fresh and its test accuracy is at least
    fresh's minus ``tolerance``; distillation — few-shot distill beats few-shot fresh; combining —
    few-shot init_distill is at least the better of init and distill minus ``tolerance``.
    """
    agg = aggregate(records)
    claims: dict[str, dict[str, Any]] = {
        "compatibility": {"cells": []},
        "interpolation_low_loss": {"cells": []},
        "attention_similarity": {"cells": []},
        "init_faster_no_worse": {"cells": []},
        "distill_helps_few_shot": {"cells": []},
        "combining_best": {"cells": []},
    }
    for t, h in _tasks_hops(agg, peft):
        k = lambda regime, role, t=t, h=h: f"{peft}/{t}/{h}/{regime}/{role}"
        floor, source, direct = (_mean(agg, k("full", "direct"), f) for f in ("floor", "source", "direct"))
        if None not in (floor, source, direct):
            margin = source - floor
            recovered = (direct - floor) / margin if margin > 0 else None
            claims["compatibility"]["cells"].append(
                {"task": t, "hop": h, "source": source, "direct": direct, "floor": floor, "recovered_margin": recovered,
                 "held": recovered is not None and recovered >= 0.5}
            )
        interp = agg.get(k("analysis", "interp_model_fresh"))
        if interp:
            claims["interpolation_low_loss"]["cells"].append(
                {"task": t, "hop": h, "loss_barrier": _mean(agg, k("analysis", "interp_model_fresh"), "loss_barrier"),
                 "accuracy_barrier": _mean(agg, k("analysis", "interp_model_fresh"), "accuracy_barrier"),
                 "connected_seeds": sum(interp.get("connected", [])), "seeds": len(interp.get("connected", [])),
                 "held": all(interp.get("connected", [False]))}
            )
        sim, chance = _mean(agg, k("analysis", "similarity_fresh"), "similarity"), _mean(agg, k("analysis", "similarity_fresh"), "chance")
        if sim is not None and chance is not None:
            claims["attention_similarity"]["cells"].append({"task": t, "hop": h, "similarity": sim, "chance": chance, "held": sim > chance})
        fresh_test, init_test = _mean(agg, k("full", "fresh"), "test"), _mean(agg, k("full", "init"), "test")
        fresh_steps, init_steps = _mean(agg, k("full", "fresh"), "steps99"), _mean(agg, k("full", "init"), "steps99")
        if fresh_test is not None and init_test is not None:
            faster = init_steps is not None and (fresh_steps is None or init_steps <= fresh_steps)
            claims["init_faster_no_worse"]["cells"].append(
                {"task": t, "hop": h, "fresh_test": fresh_test, "init_test": init_test, "fresh_steps99": fresh_steps,
                 "init_steps99": init_steps, "faster": faster, "no_worse": init_test >= fresh_test - tolerance,
                 "held": faster and init_test >= fresh_test - tolerance}
            )
        few = {m: _mean(agg, k("few", m), "test") for m in FEW_SHOT_METHODS}
        if few["fresh"] is not None and few["distill"] is not None:
            claims["distill_helps_few_shot"]["cells"].append(
                {"task": t, "hop": h, "fresh": few["fresh"], "distill": few["distill"], "held": few["distill"] > few["fresh"]}
            )
        if None not in (few["init"], few["distill"], few["init_distill"]):
            claims["combining_best"]["cells"].append(
                {"task": t, "hop": h, **{m: few[m] for m in FEW_SHOT_METHODS},
                 "held": few["init_distill"] >= max(few["init"], few["distill"]) - tolerance,
                 "strictly_best": few["init_distill"] > max(few["init"], few["distill"], few["fresh"] or 0.0)}
            )
    for claim in claims.values():
        cells = claim["cells"]
        claim["held_in"] = sum(bool(c["held"]) for c in cells)
        claim["of"] = len(cells)
    return claims
