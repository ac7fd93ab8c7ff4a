"""The training loop: accumulation, schedule, resume, cancel, progress, best checkpoint."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from core_helpers import adapter_tensors, load_base, train
from safetensors.torch import load_file

from recycling_core.adaptation import AdaptedModel, AdapterOptions, new_adapter
from recycling_core.data import load_task
from recycling_core.errors import ConfigError, JobCancelled
from recycling_core.pipeline import RecycleRequest, recycle_adapter
from recycling_core.reports import TaskScore
from recycling_core.tasking import TaskFormat
from recycling_core.training import (
    Progress,
    RunHooks,
    Trainer,
    TrainingConfig,
    learning_rate_factor,
)


def _student(model_dir: Path, task_dir: Path, seed: int = 0) -> tuple[AdaptedModel, TaskFormat]:
    """A fresh LoRA student with a seeded init (the same seed gives the same start)."""
    base = load_base(model_dir, task_dir, seed=seed)
    task = load_task(task_dir)
    adapted = new_adapter(
        base, AdapterOptions(peft="lora", lora_dropout=0.0), dict(task.label2id), seed=seed
    )
    return adapted, TaskFormat(task, base.tokenizer, base.info.kind)


def _capture_steps(trainer: Trainer) -> list[dict]:
    """Record, at every optimizer step, the learning rate and the gradients it applies."""
    records: list[dict] = []
    optimizer = trainer.optimizer
    original = optimizer.step

    def step(*args, **kwargs):
        named = {name: p for name, p in trainer.student.model.named_parameters() if p.requires_grad}
        records.append(
            {
                "lr": optimizer.param_groups[0]["lr"],
                "grads": {
                    n: p.grad.detach().clone() for n, p in named.items() if p.grad is not None
                },
                "before": {n: p.detach().clone() for n, p in named.items()},
            }
        )
        return original(*args, **kwargs)

    optimizer.step = step  # type: ignore[method-assign]
    return records


# ----------------------------------------------------------------------------- accumulation
def test_gradient_accumulation_matches_one_large_batch(causal_v0: Path, cls_task: Path) -> None:
    """8 × 2 accumulated micro-batches give the gradient and update of one batch of 16.

    The causal tiny model has no dropout and LoRA dropout is 0, so the runs are deterministic;
    16 training examples make both runs see exactly the same examples in their first step.
    Clipping is off so that a wrong scale of the accumulated gradient could not hide.
    """
    results = {}
    for batch_size, accumulation in ((16, 1), (8, 2)):
        student, fmt = _student(causal_v0, cls_task)
        train = fmt.encode(fmt.task.train[:16])
        config = TrainingConfig(
            steps=1,
            batch_size=batch_size,
            grad_accumulation=accumulation,
            learning_rate=1e-2,
            max_grad_norm=0.0,
            warmup_ratio=0.0,
            eval_every=1,
        )
        trainer = Trainer(student, fmt, train, fmt.encode(fmt.task.dev[:8]), config)
        records = _capture_steps(trainer)
        after_step: dict[int, dict[str, torch.Tensor]] = {}

        def on_progress(
            progress: Progress, student: AdaptedModel = student, after_step=after_step
        ) -> None:
            named = student.model.named_parameters()
            after_step[progress.step] = {n: q.detach().clone() for n, q in named if q.requires_grad}

        trainer.hooks.progress = on_progress
        trainer.run()
        results[(batch_size, accumulation)] = (records[0], after_step[1])
    (single, single_after), (accumulated, accumulated_after) = results[(16, 1)], results[(8, 2)]
    assert single["grads"].keys() == accumulated["grads"].keys() and single["grads"]
    for name, grad in single["grads"].items():
        assert torch.allclose(accumulated["grads"][name], grad, rtol=1e-4, atol=1e-7), name
    assert any(grad.abs().sum() > 0 for grad in single["grads"].values())
    for name in single_after:
        update_single = single_after[name] - single["before"][name]
        update_accumulated = accumulated_after[name] - accumulated["before"][name]
        assert torch.allclose(update_accumulated, update_single, rtol=1e-3, atol=1e-6), name


# ----------------------------------------------------------------------------- schedule
def test_learning_rate_schedule_values() -> None:
    # 100 steps, 10% warm-up: linear ramp to 1 over 10 steps, then decay over the other 90
    assert learning_rate_factor(0, 100, 0.1, "linear") == pytest.approx(0.1)
    assert learning_rate_factor(4, 100, 0.1, "linear") == pytest.approx(0.5)
    assert learning_rate_factor(9, 100, 0.1, "linear") == pytest.approx(1.0)
    assert learning_rate_factor(10, 100, 0.1, "linear") == pytest.approx(1.0)
    assert learning_rate_factor(55, 100, 0.1, "linear") == pytest.approx(0.5)
    assert learning_rate_factor(99, 100, 0.1, "linear") == pytest.approx(1 / 90)
    assert learning_rate_factor(55, 100, 0.1, "cosine") == pytest.approx(0.5)
    assert learning_rate_factor(20, 50, 0.2, "cosine") == pytest.approx(
        0.5 * (1 + math.cos(math.pi * 0.25))
    )
    assert learning_rate_factor(99, 100, 0.1, "cosine") == pytest.approx(
        0.5 * (1 + math.cos(math.pi * 89 / 90))
    )
    assert learning_rate_factor(4, 100, 0.1, "constant") == pytest.approx(0.5)
    assert learning_rate_factor(70, 100, 0.1, "constant") == 1.0
    assert learning_rate_factor(0, 10, 0.0, "linear") == 1.0
    assert learning_rate_factor(5, 10, 0.0, "linear") == pytest.approx(0.5)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_trainer_applies_the_schedule(schedule: str, causal_v0: Path, cls_task: Path) -> None:
    student, fmt = _student(causal_v0, cls_task)
    config = TrainingConfig(
        steps=10,
        warmup_ratio=0.2,
        schedule=schedule,
        learning_rate=1e-3,
        batch_size=8,
        eval_every=10,
    )
    trainer = Trainer(
        student, fmt, fmt.encode(fmt.task.train[:32]), fmt.encode(fmt.task.dev[:8]), config
    )
    records = _capture_steps(trainer)
    trainer.run()
    lrs = [record["lr"] for record in records]
    expected = [1e-3 * learning_rate_factor(step, 10, 0.2, schedule) for step in range(10)]
    assert lrs == pytest.approx(expected)
    assert lrs[0] == pytest.approx(0.5e-3) and lrs[1] == pytest.approx(1e-3)  # 2 warm-up steps
    assert max(lrs) == pytest.approx(1e-3) and lrs[-1] < lrs[2]


# ----------------------------------------------------------------------------- resume
RESUME_CONFIG = TrainingConfig(steps=20, eval_every=5, batch_size=8, learning_rate=1e-2, seed=3)


def _run_to_the_end(
    model_dir: Path, task_dir: Path, checkpoint_dir: Path, cancel_after: int | None = None
):
    student, fmt = _student(model_dir, task_dir, seed=3)
    calls = {"n": 0}

    def should_cancel() -> bool:
        calls["n"] += 1
        return cancel_after is not None and calls["n"] > cancel_after

    hooks = RunHooks(should_cancel=should_cancel, checkpoint_dir=checkpoint_dir)
    trainer = Trainer(
        student,
        fmt,
        fmt.encode(fmt.task.train[:40]),
        fmt.encode(fmt.task.dev[:16]),
        RESUME_CONFIG,
        hooks,
    )
    return student, trainer.run()


@pytest.mark.parametrize("cancel_after", [10, 12])
def test_cancel_and_resume_gives_the_uninterrupted_result(
    cancel_after: int, causal_v0: Path, cls_task: Path, tmp_path: Path
) -> None:
    """Cancel at step 10 (a checkpoint) or 12 (between checkpoints), resume: same weights."""
    straight_student, straight = _run_to_the_end(causal_v0, cls_task, tmp_path / "straight")

    interrupted = tmp_path / "interrupted"
    with pytest.raises(JobCancelled):
        _run_to_the_end(causal_v0, cls_task, interrupted, cancel_after=cancel_after)
    assert (interrupted / "trainer_state.json").is_file()
    # a new process: another random start, which the checkpoint replaces
    resumed_student, resumed = _run_to_the_end(causal_v0, cls_task, interrupted)
    assert resumed.resumed_from_step == 10
    assert straight.resumed_from_step == 0

    final_straight = load_file(str(tmp_path / "straight" / "trainable.safetensors"))
    final_resumed = load_file(str(interrupted / "trainable.safetensors"))
    assert final_straight.keys() == final_resumed.keys()
    for name, value in final_straight.items():
        assert torch.allclose(final_resumed[name], value, rtol=1e-6, atol=1e-7), name
    # the kept (best) weights and the whole dev curve agree too
    best_straight, best_resumed = (
        straight_student.trainable_state(),
        resumed_student.trainable_state(),
    )
    for name, value in best_straight.items():
        assert torch.allclose(best_resumed[name], value, rtol=1e-6, atol=1e-7), name
    assert [p.step for p in resumed.curve.points] == [p.step for p in straight.curve.points]
    assert [p.metric for p in resumed.curve.points] == [p.metric for p in straight.curve.points]
    assert resumed.curve.best_step == straight.curve.best_step
    assert [s for s, _ in resumed.curve.train_loss] == list(range(1, 21))
    assert [l for _, l in resumed.curve.train_loss] == pytest.approx(
        [l for _, l in straight.curve.train_loss], rel=1e-5
    )


def test_resume_refuses_other_hyperparameters(
    causal_v0: Path, cls_task: Path, tmp_path: Path
) -> None:
    with pytest.raises(JobCancelled):
        _run_to_the_end(causal_v0, cls_task, tmp_path / "ckpt", cancel_after=6)
    student, fmt = _student(causal_v0, cls_task, seed=3)
    other = replace(RESUME_CONFIG, learning_rate=5e-3)
    trainer = Trainer(
        student,
        fmt,
        fmt.encode(fmt.task.train[:40]),
        fmt.encode(fmt.task.dev[:16]),
        other,
        RunHooks(checkpoint_dir=tmp_path / "ckpt"),
    )
    with pytest.raises(ConfigError) as caught:
        trainer.run()
    assert caught.value.field == "checkpoint_dir"


# ----------------------------------------------------------------------------- progress
def test_progress_reports_increasing_steps_with_eta(causal_v0: Path, cls_task: Path) -> None:
    student, fmt = _student(causal_v0, cls_task)
    seen: list[Progress] = []
    config = TrainingConfig(steps=12, eval_every=4, batch_size=8, learning_rate=1e-2)
    Trainer(
        student,
        fmt,
        fmt.encode(fmt.task.train[:32]),
        fmt.encode(fmt.task.dev[:8]),
        config,
        RunHooks(progress=seen.append),
    ).run()
    steps = [p.step for p in seen]
    assert steps == list(range(13))
    assert all(p.total == 12 and p.phase == "train" for p in seen)
    assert seen[0].eta_seconds is None and "dev_metric" in seen[0].metrics
    etas = [p.eta_seconds for p in seen[1:]]
    assert all(eta is not None and eta >= 0 for eta in etas)
    assert etas[-1] == 0
    assert all("train_loss" in p.metrics for p in seen[1:])
    assert [p.step for p in seen if "dev_metric" in p.metrics] == [0, 4, 8, 12]


# ----------------------------------------------------------------------------- best checkpoint
def test_best_checkpoint_is_kept(causal_v0: Path, cls_task: Path) -> None:
    """Scripted dev scores: the weights after training are those of the best dev step."""
    student, fmt = _student(causal_v0, cls_task)
    config = TrainingConfig(steps=20, eval_every=5, batch_size=8, learning_rate=1e-2)
    trainer = Trainer(
        student, fmt, fmt.encode(fmt.task.train[:32]), fmt.encode(fmt.task.dev[:8]), config
    )
    scripted = iter(
        [(0.30, 1.1), (0.60, 0.9), (0.90, 0.7), (0.90, 0.6), (0.40, 0.5)]
    )  # steps 0, 5, ..., 20

    def fake_evaluate() -> TaskScore:
        accuracy, loss = next(scripted)
        return TaskScore(
            split="dev", n=8, loss=loss, accuracy=accuracy, macro_f1=accuracy, floor=0.3
        )

    trainer._evaluate = fake_evaluate  # type: ignore[method-assign]
    snapshots: dict[int, dict[str, torch.Tensor]] = {}
    trainer.hooks.progress = lambda p: snapshots.__setitem__(p.step, student.trainable_state())
    result = trainer.run()
    # steps 10 and 15 tie on accuracy; 15 has the lower dev loss
    assert result.curve.best_step == 15
    assert result.curve.best_metric == 0.90
    assert (
        result.best_dev is not None
        and result.best_dev.accuracy == 0.90
        and result.best_dev.loss == 0.6
    )
    kept = student.trainable_state()
    assert all(torch.equal(kept[k], snapshots[15][k]) for k in kept)
    assert any(not torch.equal(kept[k], snapshots[20][k]) for k in kept)


def test_best_checkpoint_prefers_the_earlier_step_on_a_full_tie(
    causal_v0: Path, cls_task: Path
) -> None:
    student, fmt = _student(causal_v0, cls_task)
    config = TrainingConfig(steps=10, eval_every=5, batch_size=8, learning_rate=1e-2)
    trainer = Trainer(
        student, fmt, fmt.encode(fmt.task.train[:32]), fmt.encode(fmt.task.dev[:8]), config
    )
    scripted = iter([(0.5, 1.0), (0.7, 0.8), (0.7, 0.8)])

    def fake_evaluate() -> TaskScore:
        accuracy, loss = next(scripted)
        return TaskScore(split="dev", n=8, loss=loss, accuracy=accuracy)

    trainer._evaluate = fake_evaluate  # type: ignore[method-assign]
    assert trainer.run().curve.best_step == 5


# ----------------------------------------------------------------------------- seeds
def test_a_seeded_run_is_reproducible(causal_lora, tmp_path: Path) -> None:
    """The same seed gives the same adapter, whatever the global RNG did before; another seed
    gives another one (the report is enough to reproduce the run)."""
    config = TrainingConfig(steps=6, eval_every=3, batch_size=16, learning_rate=1e-2, seed=5)
    source = causal_lora
    first = train(source.old, source.task, tmp_path / "first", config=config)
    torch.rand(1234)  # the global RNG moves on: the run must not depend on it
    second = train(source.old, source.task, tmp_path / "second", config=config)
    other = train(source.old, source.task, tmp_path / "other", config=replace(config, seed=6))
    a, b = adapter_tensors(tmp_path / "first"), adapter_tensors(tmp_path / "second")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert first.curve.points == second.curve.points
    c = adapter_tensors(tmp_path / "other")
    assert any(not torch.equal(a[k], c[k]) for k in a)
    assert other.seed == 6

    # the same for a fresh adapter made by recycling
    fresh = []
    for name in ("fresh_1", "fresh_2"):
        torch.rand(99)
        request = RecycleRequest(
            "fresh",
            source.adapter,
            source.old,
            source.new,
            source.task,
            tmp_path / name,
            training=config,
        )
        fresh.append(recycle_adapter(request))
    a, b = adapter_tensors(tmp_path / "fresh_1"), adapter_tensors(tmp_path / "fresh_2")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert fresh[0].curve.points == fresh[1].curve.points
