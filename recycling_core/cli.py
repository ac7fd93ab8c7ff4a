"""The ``recycle`` command line: the library's runs on plain directories.

The service adds its own sub-commands (serve, demo, registry actions) to the same program; this
module knows nothing of them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
from rich.progress import Progress as ProgressBar

from recycling_core.errors import IncompatibleAdapterError, RecyclingError
from recycling_core.reports import Report

app = typer.Typer(
    name="recycle",
    help="Recycle adapters and fine-tuning deltas when a base language model is upgraded.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
err_console = Console(stderr=True)

DEFAULT_LEARNING_RATES = {"lora": 1e-3, "ia3": 3e-3, "prompt": 3e-2, "full": 5e-5}
EXIT_INCOMPATIBLE = 3
EXIT_ERROR = 2


class PeftChoice(str, Enum):
    lora = "lora"
    ia3 = "ia3"
    prompt = "prompt"
    full = "full"


class MethodChoice(str, Enum):
    direct = "direct"
    init = "init"
    distill = "distill"
    init_distill = "init_distill"
    fresh = "fresh"


class ModeChoice(str, Enum):
    model = "model"
    adapter = "adapter"


class DeviceChoice(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


ExistingDir = Annotated[Path, typer.Option(exists=True, file_okay=False, dir_okay=True, resolve_path=True)]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print the machine-readable report on stdout.")]
Steps = Annotated[int, typer.Option(min=1, help="Optimizer steps.")]
Seed = Annotated[int, typer.Option(help="Random seed (data order, init, dropout, few-shot sample).")]
FewShot = Annotated[int | None, typer.Option(min=1, help="Train on K examples per label.")]
LearningRate = Annotated[float | None, typer.Option("--lr", help="Peak learning rate (default by adapter type).")]
BatchSize = Annotated[int, typer.Option(min=1, help="Examples per optimizer step.")]
EvalEvery = Annotated[int, typer.Option(min=1, help="Evaluate on dev every N steps.")]
Device = Annotated[DeviceChoice, typer.Option(help="Where to run; auto picks CUDA when present.")]


def run_guarded(action: Callable[[], object]) -> object:
    """Run an action; library errors become a one-line message and a non-zero exit."""
    try:
        return action()
    except IncompatibleAdapterError as error:
        where = f" [{error.field}]" if error.field else ""
        err_console.print(f"[red]incompatible{where}:[/red] {error}")
        raise typer.Exit(EXIT_INCOMPATIBLE) from error
    except RecyclingError as error:
        err_console.print(f"[red]{error.code}:[/red] {error}")
        raise typer.Exit(EXIT_ERROR) from error


class _ProgressPrinter:
    """A rich progress bar fed by the library's progress hook (stderr, so --json stays clean)."""

    def __init__(self, description: str) -> None:
        self.bar = ProgressBar(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TextColumn("{task.fields[metrics]}"),
            TimeRemainingColumn(),
            console=err_console,
            transient=False,
        )
        self.description = description
        self.task_id: int | None = None

    def __enter__(self) -> _ProgressPrinter:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def __call__(self, progress) -> None:  # recycling_core.training.Progress
        metrics = " ".join(f"{k}={v:.4g}" for k, v in sorted(progress.metrics.items()))
        label = f"{self.description} ({progress.phase})"
        if self.task_id is None:
            self.task_id = self.bar.add_task(label, total=progress.total, metrics=metrics)
        self.bar.update(self.task_id, completed=progress.step, total=progress.total, description=label, metrics=metrics)


def _hooks(printer: _ProgressPrinter):
    from recycling_core.training import RunHooks

    return RunHooks(progress=printer)


def _emit(report: Report, as_json: bool, summary: Callable[[Report], str], out_file: Path | None = None) -> None:
    if out_file is not None:
        report.write(out_file)
    if as_json:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    else:
        typer.echo(summary(report))


def _training_config(steps: int, batch_size: int, eval_every: int, lr: float | None, peft: str, seed: int, device: str):
    from recycling_core.training import TrainingConfig

    return TrainingConfig(
        steps=steps,
        batch_size=batch_size,
        eval_every=min(eval_every, steps),
        learning_rate=lr if lr is not None else DEFAULT_LEARNING_RATES[peft],
        seed=seed,
        device=device,  # type: ignore[arg-type]
    )


def _score_line(report: Report) -> str:
    parts = []
    for name in ("test", "dev"):
        score = getattr(report.metrics, name)
        if score is not None:
            parts.append(f"{name} {score.primary:.4f} (loss {score.loss:.4f})")
    return ", ".join(parts)


@app.command("simulate-upgrade")
def simulate_upgrade_command(
    base: ExistingDir,
    corpus: Annotated[Path, typer.Option(exists=True, dir_okay=False, resolve_path=True, help="UTF-8 text, one passage per line.")],
    out: Annotated[Path, typer.Option(resolve_path=True, help="Where to write the upgraded model.")],
    steps: Steps = 500,
    lr: Annotated[float, typer.Option("--lr")] = 5e-5,
    batch_size: BatchSize = 32,
    max_length: Annotated[int, typer.Option(min=16)] = 128,
    eval_corpus: Annotated[list[Path] | None, typer.Option(exists=True, dir_okay=False, help="Extra held-out corpora.")] = None,
    seed: Seed = 0,
    device: Device = DeviceChoice.auto,
    as_json: JsonFlag = False,
) -> None:
    """Make an upgraded model version by continual pre-training on a corpus.

    Example: recycle simulate-upgrade --base v1 --corpus news.txt --steps 2000 --out v2
    """
    from recycling_core.upgrade import UpgradeConfig, UpgradeRequest, simulate_upgrade

    config = UpgradeConfig(steps=steps, learning_rate=lr, batch_size=batch_size, max_length=max_length, seed=seed, device=device.value)
    request = UpgradeRequest(base, corpus, out, config, eval_corpora=tuple(eval_corpus or ()))
    with _ProgressPrinter("upgrade") as printer:
        report = run_guarded(lambda: simulate_upgrade(request, _hooks(printer)))
    assert isinstance(report, Report)
    extra = report.metrics.extra
    _emit(
        report,
        as_json,
        lambda r: (
            f"upgraded model written to {out}\n"
            f"relative weight change {r.metrics.weight_distance.relative_l2:.4f}, "  # type: ignore[union-attr]
            f"held-out LM loss {extra.get('held_out_loss_before', float('nan')):.4f} -> "
            f"{extra.get('held_out_loss_after', float('nan')):.4f}"
        ),
    )


@app.command("train")
def train_command(
    base: ExistingDir,
    task: ExistingDir,
    out: Annotated[Path, typer.Option(resolve_path=True, help="Where to write the adapter.")],
    peft: Annotated[PeftChoice, typer.Option(help="Adapter type.")] = PeftChoice.lora,
    steps: Steps = 200,
    few_shot: FewShot = None,
    seed: Seed = 0,
    lr: LearningRate = None,
    batch_size: BatchSize = 16,
    eval_every: EvalEvery = 20,
    rank: Annotated[int, typer.Option(min=1, help="LoRA rank.")] = 8,
    device: Device = DeviceChoice.auto,
    as_json: JsonFlag = False,
) -> None:
    """Tune a fresh adapter on a base model for a task.

    Example: recycle train --base v1 --task trec --out a0 --peft lora --steps 300
    """
    from recycling_core.adaptation import AdapterOptions
    from recycling_core.pipeline import TrainRequest, train_adapter

    request = TrainRequest(
        base_dir=base,
        task_dir=task,
        out_dir=out,
        adapter=AdapterOptions(peft=peft.value, lora_rank=rank, lora_alpha=2 * rank),
        training=_training_config(steps, batch_size, eval_every, lr, peft.value, seed, device.value),
        few_shot=few_shot,
    )
    with _ProgressPrinter("train") as printer:
        report = run_guarded(lambda: train_adapter(request, _hooks(printer)))
    assert isinstance(report, Report)
    _emit(report, as_json, lambda r: f"adapter written to {out}: {_score_line(r)}")


@app.command("check")
def check_command(
    adapter: ExistingDir,
    base: ExistingDir,
    task: Annotated[Path | None, typer.Option(exists=True, file_okay=False, help="Also check the label set.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Check an adapter against a base model; exit 0 when compatible, 3 with the mismatch otherwise.

    Example: recycle check --adapter a0 --base v2
    """
    from recycling_core.compat import check_compatibility
    from recycling_core.data import load_task

    def action():
        labels = None
        if task is not None:
            loaded = load_task(task)
            labels = loaded.labels if loaded.kind == "classification" else None
        return check_compatibility(adapter, base, labels=labels)

    result = run_guarded(action)
    payload = {
        "compatible": True,
        "adapter": result.adapter,  # type: ignore[attr-defined]
        "base": result.base,  # type: ignore[attr-defined]
        "peft_type": result.peft_type,  # type: ignore[attr-defined]
        "modules_checked": result.modules_checked,  # type: ignore[attr-defined]
        "checks": result.checks,  # type: ignore[attr-defined]
    }
    if as_json:
        typer.echo(json.dumps(payload, indent=2))
    else:
        typer.echo(f"compatible: {payload['peft_type']} adapter, {payload['modules_checked']} tensors checked ({', '.join(payload['checks'])})")


@app.command("recycle")
def recycle_command(
    method: Annotated[MethodChoice, typer.Option(help="Recycling method.")],
    adapter: ExistingDir,
    old_base: ExistingDir,
    new_base: ExistingDir,
    task: ExistingDir,
    out: Annotated[Path, typer.Option(resolve_path=True, help="Where to write the recycled adapter and report.json.")],
    steps: Steps = 200,
    few_shot: FewShot = None,
    seed: Seed = 0,
    lr: LearningRate = None,
    batch_size: BatchSize = 16,
    eval_every: EvalEvery = 20,
    target: Annotated[float | None, typer.Option(help="Dev metric that counts as converged.")] = None,
    distill_alpha: Annotated[float, typer.Option(min=0.0, max=1.0)] = 0.5,
    temperature: Annotated[float, typer.Option(min=0.01)] = 2.0,
    device: Device = DeviceChoice.auto,
    as_json: JsonFlag = False,
) -> None:
    """Recycle an outdated adapter for the upgraded model.

    Example: recycle recycle --method init --adapter a0 --old-base v1 --new-base v2 --task trec --out a1
    """
    from dataclasses import replace

    from recycling_core.adapters import inspect_adapter_dir
    from recycling_core.pipeline import RecycleRequest, adapter_options_like, recycle_adapter

    def action():
        peft = adapter_options_like(inspect_adapter_dir(adapter)).peft
        config = replace(
            _training_config(steps, batch_size, eval_every, lr, peft, seed, device.value),
            distill_alpha=distill_alpha,
            distill_temperature=temperature,
        )
        request = RecycleRequest(
            method=method.value, adapter_dir=adapter, old_base_dir=old_base, new_base_dir=new_base,
            task_dir=task, out_dir=out, training=config, few_shot=few_shot, target=target,
        )
        with _ProgressPrinter(method.value) as printer:
            return recycle_adapter(request, _hooks(printer))

    report = run_guarded(action)
    assert isinstance(report, Report)

    def summary(r: Report) -> str:
        compat = r.metrics.compatibility
        lines = [f"{r.method}: recycled adapter written to {out}: {_score_line(r)}"]
        if compat is not None:
            lines.append(
                f"  source {compat.source:.4f}, direct {compat.direct:.4f}, retention {compat.retention:.3f}, "
                f"negative flips {compat.negative_flip_rate:.3f}"
            )
        if r.metrics.convergence is not None:
            c = r.metrics.convergence
            lines.append(f"  steps to target {c.target:.4f}: {c.steps_to_target}")
        return "\n".join(lines)

    _emit(report, as_json, summary)


@app.command("interpolate")
def interpolate_command(
    mode: Annotated[ModeChoice, typer.Option(help="model: lerp merged models (the paper); adapter: lerp ΔW on the new base.")],
    old_base: ExistingDir,
    old_adapter: ExistingDir,
    new_base: ExistingDir,
    new_adapter: ExistingDir,
    task: ExistingDir,
    out: Annotated[Path, typer.Option(resolve_path=True, help="Report file to write.")],
    points: Annotated[int, typer.Option(min=2)] = 11,
    split: Annotated[str, typer.Option(help="dev or test")] = "test",
    device: Device = DeviceChoice.auto,
    as_json: JsonFlag = False,
) -> None:
    """Linear mode connectivity: loss and metric along the line between two adapted models.

    Example: recycle interpolate --mode model --old-base v1 --old-adapter a0 --new-base v2 --new-adapter a1 --task trec --points 11 --out lmc.json
    """
    from recycling_core.pipeline import InterpolationRequest, interpolate

    request = InterpolationRequest(
        mode=mode.value, old_base_dir=old_base, old_adapter_dir=old_adapter, new_base_dir=new_base,
        new_adapter_dir=new_adapter, task_dir=task, points=points, split=split, device=device.value,  # type: ignore[arg-type]
    )
    with _ProgressPrinter("interpolate") as printer:
        report = run_guarded(lambda: interpolate(request, _hooks(printer)))
    assert isinstance(report, Report)

    def summary(r: Report) -> str:
        i = r.metrics.interpolation
        assert i is not None
        curve = " ".join(f"{a:.1f}:{m:.3f}" for a, m in zip(i.alphas, i.metrics))
        return (
            f"{i.mode} interpolation on {i.split}: loss barrier {i.loss_barrier:.4f}, accuracy barrier "
            f"{i.accuracy_barrier:.4f}, connected={i.connected}\n  {curve}\nreport written to {out}"
        )

    _emit(report, as_json, summary, out)


@app.command("similarity")
def similarity_command(
    old_base: ExistingDir,
    old_adapter: ExistingDir,
    new_base: ExistingDir,
    new_adapter: ExistingDir,
    task: ExistingDir,
    out: Annotated[Path, typer.Option(resolve_path=True, help="Report file to write.")],
    probes: Annotated[int, typer.Option(min=1)] = 32,
    device: Device = DeviceChoice.auto,
    as_json: JsonFlag = False,
) -> None:
    """Attention-head similarity of the old and new adapted models, against its chance level.

    Example: recycle similarity --old-base v1 --old-adapter a0 --new-base v2 --new-adapter a1 --task trec --out sim.json
    """
    from recycling_core.pipeline import SimilarityRequest, attention_similarity

    request = SimilarityRequest(
        old_base_dir=old_base, old_adapter_dir=old_adapter, new_base_dir=new_base, new_adapter_dir=new_adapter,
        task_dir=task, probes=probes, device=device.value,  # type: ignore[arg-type]
    )
    report = run_guarded(lambda: attention_similarity(request))
    assert isinstance(report, Report)
    _emit(
        report,
        as_json,
        lambda r: (
            f"attention similarity {r.metrics.similarity.mean:.4f} (chance level "  # type: ignore[union-attr]
            f"{r.metrics.similarity.chance_level:.4f}) over {r.metrics.similarity.n_probes} probes\n"  # type: ignore[union-attr]
            f"report written to {out}"
        ),
        out,
    )


@app.command("tiny-setup")
def tiny_setup_command(
    out: Annotated[Path, typer.Option(resolve_path=True, help="Directory to fill.")],
    kind: Annotated[str, typer.Option(help="encoder or causal")] = "encoder",
    task_kind: Annotated[str, typer.Option(help="classification or generation")] = "classification",
    seed: Seed = 0,
) -> None:
    """Write a tiny random base model, a synthetic task and two domain corpora (no download).

    Example: recycle tiny-setup --out demo && recycle simulate-upgrade --base demo/model --corpus demo/corpus_a.txt --steps 200 --out demo/v1
    """
    from recycling_core.tiny import make_corpus, make_synthetic_task, make_tiny_model

    def action():
        model = make_tiny_model(out / "model", kind=kind, seed=seed)  # type: ignore[arg-type]
        task = make_synthetic_task(out / "task", seed=seed, kind=task_kind)  # type: ignore[arg-type]
        corpus_a = make_corpus(out / "corpus_a.txt", 3000, seed, "a")
        corpus_b = make_corpus(out / "corpus_b.txt", 3000, seed + 1, "b")
        return model, task, corpus_a, corpus_b

    model, task, corpus_a, corpus_b = run_guarded(action)  # type: ignore[misc]
    typer.echo(f"model {model}\ntask {task}\ncorpora {corpus_a} {corpus_b}")


def main() -> None:
    """Entry point of the library-only command line."""
    app()


if __name__ == "__main__":
    main()
