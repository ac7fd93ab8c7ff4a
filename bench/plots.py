"""PNG figures of the benchmark (matplotlib, Agg): convergence, interpolation, attention similarity."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.collect import Record
from bench.profiles import FEW_SHOT_METHODS, HOPS, TASKS

PEFT_LABEL = {"lora": "LoRA", "full": "full fine-tuning"}
COLORS = {"fresh": "#444444", "init": "#1f77b4", "distill": "#ff7f0e", "init_distill": "#2ca02c", "direct": "#9467bd"}


def _grid(records: list[Record], peft: str) -> tuple[list[str], list[str]]:
    tasks = [t for t in TASKS if any(r["task"] == t and r["peft"] == peft for r in records)]
    tasks += sorted({r["task"] for r in records if r["peft"] == peft} - set(tasks))
    hops = [h for h in HOPS if any(r["hop"] == h and r["peft"] == peft for r in records)]
    hops += sorted({r["hop"] for r in records if r["peft"] == peft and r["hop"]} - set(hops))
    return tasks, hops


def _size(rows: int, cols: int, width: float = 4.2, height: float = 3.0) -> tuple[float, float]:
    """Figure size: panels of ``width`` × ``height`` inches, at least 9 × 4.5 for the titles."""
    return max(width * cols, 9.0), max(height * rows, 4.5)


def _mean_curve(members: list[Record]) -> tuple[list[int], list[float]]:
    curves = [m["metrics"]["curve"] for m in members if m["metrics"].get("curve")]
    if not curves:
        return [], []
    length = min(len(c["steps"]) for c in curves)
    steps = curves[0]["steps"][:length]
    values = [statistics.fmean(c["dev"][i] for c in curves) for i in range(length)]
    return steps, values


def plot_convergence(records: list[Record], path: Path, regime: str, peft: str = "lora") -> Path | None:
    """Dev accuracy against steps per method (mean over seeds), fresh in grey, the 99% target dashed."""
    methods = ("fresh", "init") if regime == "full" else FEW_SHOT_METHODS
    tasks, hops = _grid(records, peft)
    chosen = [r for r in records if r["peft"] == peft and r["regime"] == regime and r["role"] in methods]
    if not chosen or not tasks or not hops:
        return None
    fig, axes = plt.subplots(len(tasks), len(hops), figsize=_size(len(tasks), len(hops)), squeeze=False, sharex=True)
    for row, task in enumerate(tasks):
        for col, hop in enumerate(hops):
            ax = axes[row][col]
            group = [r for r in chosen if r["task"] == task and r["hop"] == hop]
            for method in methods:
                members = [r for r in group if r["role"] == method]
                steps, values = _mean_curve(members)
                if steps:
                    ax.plot(steps, values, marker="o", markersize=3, color=COLORS[method], label=method,
                            linewidth=2.2 if method != "fresh" else 1.6, linestyle="-" if method != "fresh" else "--")
            fresh = [r for r in group if r["role"] == "fresh"]
            targets = [r["metrics"].get("vs_fresh", {}).get("target99", {}).get("target") for r in fresh]
            targets = [t for t in targets if t is not None]
            if targets:
                ax.axhline(statistics.fmean(targets), color="red", linewidth=1, linestyle=":", label="target (99% of fresh best)")
            direct = [r for r in records if r["peft"] == peft and r["task"] == task and r["hop"] == hop and r["role"] == "direct" and r["regime"] == "full"]
            floors = [d["metrics"].get("compatibility", {}).get("floor") for d in direct]
            floors = [f for f in floors if f is not None]
            if floors:
                ax.axhline(statistics.fmean(floors), color="#bbbbbb", linewidth=1, label="majority floor")
            ax.set_title(f"{task}, {hop}", fontsize=10)
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel("dev accuracy")
            if row == len(tasks) - 1:
                ax.set_xlabel("training step")
    handles, labels = axes[0][0].get_legend_handles_labels()
    title = "full data" if regime == "full" else "few-shot"
    fig.suptitle(f"Convergence ({title}, {PEFT_LABEL.get(peft, peft)}): dev accuracy, mean over seeds", y=0.995, fontsize=11)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.975), ncol=len(labels), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.95 if len(tasks) > 1 else 0.88))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_interpolation(records: list[Record], path: Path, peft: str = "lora") -> Path | None:
    """Test loss along α for model and adapter mode (A0 ↔ fresh), with the endpoints' straight line."""
    tasks, hops = _grid(records, peft)
    roles = {"interp_model_fresh": ("model mode", "#1f77b4"), "interp_adapter_fresh": ("adapter mode", "#ff7f0e")}
    chosen = [r for r in records if r["peft"] == peft and r["role"] in roles]
    if not chosen or not tasks or not hops:
        return None
    fig, axes = plt.subplots(len(tasks), len(hops), figsize=_size(len(tasks), len(hops)), squeeze=False)
    for row, task in enumerate(tasks):
        for col, hop in enumerate(hops):
            ax = axes[row][col]
            notes = []
            for role, (label, color) in roles.items():
                members = [r for r in chosen if r["task"] == task and r["hop"] == hop and r["role"] == role]
                if not members:
                    continue
                alphas = members[0]["metrics"]["interpolation"]["alphas"]
                losses = [statistics.fmean(m["metrics"]["interpolation"]["losses"][i] for m in members) for i in range(len(alphas))]
                barrier = statistics.fmean(m["metrics"]["interpolation"]["loss_barrier"] for m in members)
                acc_barrier = statistics.fmean(m["metrics"]["interpolation"]["accuracy_barrier"] for m in members)
                ax.plot(alphas, losses, marker="o", markersize=3, color=color, label=f"{label} loss")
                ax.plot([alphas[0], alphas[-1]], [losses[0], losses[-1]], color=color, linestyle=":", linewidth=1)
                notes.append(f"{label.split()[0]}: loss barrier {barrier:.3f}, acc. barrier {acc_barrier:.3f}")
            ax.set_title(f"{task}, {hop}", fontsize=10)
            ax.text(0.02, 0.98, "\n".join(notes), transform=ax.transAxes, va="top", fontsize=7)
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel("test loss")
            if row == len(tasks) - 1:
                ax.set_xlabel("α (0: outdated adapter, 1: fresh adapter on the new base)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.suptitle(f"Linear interpolation ({PEFT_LABEL.get(peft, peft)}), outdated adapter ↔ fresh adapter; dotted: straight line between the endpoints", y=0.995, fontsize=10)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.965), ncol=2, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.94 if len(tasks) > 1 else 0.88))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_similarity(records: list[Record], path: Path, peft: str = "lora", role: str = "similarity_fresh") -> Path | None:
    """Layer × head attention similarity (mean over seeds) per task and hop, chance level in the title."""
    tasks, hops = _grid(records, peft)
    chosen = [r for r in records if r["peft"] == peft and r["role"] == role]
    if not chosen or not tasks or not hops:
        return None
    fig, axes = plt.subplots(len(tasks), len(hops), figsize=_size(len(tasks), len(hops), 3.8, 3.1), squeeze=False, constrained_layout=True)
    image = None
    for row, task in enumerate(tasks):
        for col, hop in enumerate(hops):
            ax = axes[row][col]
            members = [r for r in chosen if r["task"] == task and r["hop"] == hop]
            if not members:
                ax.axis("off")
                continue
            matrices = [m["metrics"]["similarity"]["matrix"] for m in members]
            layers, heads = len(matrices[0]), len(matrices[0][0])
            mean = [[statistics.fmean(m[i][j] for m in matrices) for j in range(heads)] for i in range(layers)]
            image = ax.imshow(mean, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
            sim = statistics.fmean(m["metrics"]["similarity"]["mean"] for m in members)
            chance = statistics.fmean(m["metrics"]["similarity"]["chance_level"] for m in members)
            ax.set_title(f"{task}, {hop}\nmean {sim:.3f} (chance {chance:.3f})", fontsize=9)
            ax.set_xlabel("head")
            ax.set_ylabel("layer")
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.6, label="cosine of attention maps")
    fig.suptitle(f"Attention similarity ({PEFT_LABEL.get(peft, peft)}): old base + outdated adapter vs new base + fresh adapter", fontsize=11)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_all(records: list[Record], out_dir: Path, prefix: str = "") -> dict[str, str]:
    """Every figure that the records allow; returns name → path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    made: dict[str, Any] = {}
    for peft in ("lora", "full"):
        made[f"convergence_full_{peft}"] = plot_convergence(records, out_dir / f"{prefix}convergence-full-{peft}.png", "full", peft)
        made[f"convergence_few_{peft}"] = plot_convergence(records, out_dir / f"{prefix}convergence-fewshot-{peft}.png", "few", peft)
        made[f"interpolation_{peft}"] = plot_interpolation(records, out_dir / f"{prefix}interpolation-{peft}.png", peft)
        made[f"similarity_{peft}"] = plot_similarity(records, out_dir / f"{prefix}attention-similarity-{peft}.png", peft)
    return {k: str(v) for k, v in made.items() if v is not None}

