"""Batched multi-LoRA training (CPU correctness): N adapters in one pass = each alone.

The reference for "alone" is the plain PEFT path: :class:`recycling_core.training.Trainer` on a
PEFT LoRA model. Dropout is switched off, so the trajectories must agree up to float rounding.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from recycling_core.adaptation import AdapterOptions, new_adapter
from recycling_core.batched_training import (
    BatchedLoraTrainer,
    TrainingMember,
    batched_obstacle,
    train_members,
)
from recycling_core.data import load_task
from recycling_core.errors import JobCancelled
from recycling_core.models import HeadSpec, inspect_model_dir, load_base_model
from recycling_core.multilora import MultiLoraModel
from recycling_core.tasking import TaskFormat, evaluate
from recycling_core.tiny import make_synthetic_task
from recycling_core.training import CachedTeacher, RunHooks, Trainer, TrainingConfig

CONFIG = TrainingConfig(steps=6, eval_every=3, batch_size=8, learning_rate=2e-2, seed=0, max_length=32)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("multilora")
    return [
        make_synthetic_task(root / f"task{labels}", n_train=40, n_dev=12, n_test=12, seed=labels, num_labels=labels)
        for labels in (2, 3, 4)
    ]


def _member(base_dir: Path, task_dir: Path, config: TrainingConfig, *, rank: int = 8, hooks=None) -> TrainingMember:
    info = inspect_model_dir(base_dir)
    task = load_task(task_dir)
    head = HeadSpec(labels=tuple(task.labels), generation=task.kind == "generation")
    base = load_base_model(info, head, seed=config.seed)
    for module in base.model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    label2id = dict(task.label2id) if task.kind == "classification" else None
    adapted = new_adapter(base, AdapterOptions(lora_rank=rank), label2id, seed=config.seed)
    # LoRA's B starts at zero; give it values so that the first steps already exercise it
    with torch.no_grad():
        for name, parameter in adapted.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    task_format = TaskFormat(task, base.tokenizer, info.kind, max_length=config.max_length)
    return TrainingMember(
        adapted, task_format, task_format.encode(task.train), task_format.encode(task.dev), config,
        hooks or RunHooks(),
    )  # fmt: skip


def _alone(member: TrainingMember):
    return Trainer(
        member.student, member.task_format, member.train_features, member.dev_features, member.config, member.hooks
    ).run()


def _lora_weights(member: TrainingMember) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in member.student.model.named_parameters() if v.requires_grad}


def _assert_same_run(batched, alone, batched_member, alone_member) -> None:
    batched_losses = [loss for _, loss in batched.curve.train_loss]
    alone_losses = [loss for _, loss in alone.curve.train_loss]
    assert batched_losses == pytest.approx(alone_losses, rel=1e-4, abs=1e-5)
    assert [p.metric for p in batched.curve.points] == [p.metric for p in alone.curve.points]
    assert [p.loss for p in batched.curve.points] == pytest.approx([p.loss for p in alone.curve.points], rel=1e-4)
    assert batched.curve.best_step == alone.curve.best_step
    mine, reference = _lora_weights(batched_member), _lora_weights(alone_member)
    assert mine.keys() == reference.keys()
    for name in mine:
        torch.testing.assert_close(mine[name], reference[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("kind", ["encoder", "causal"])
def test_three_adapters_in_one_pass_follow_their_solo_runs(kind, tasks, encoder_v0, causal_v0):
    base_dir = encoder_v0 if kind == "encoder" else causal_v0
    configs = [replace(CONFIG, seed=seed) for seed in (0, 1, 2)]
    batched = [_member(base_dir, task, config) for task, config in zip(tasks, configs)]
    alone = [_member(base_dir, task, config) for task, config in zip(tasks, configs)]
    assert batched_obstacle(batched) is None
    results = BatchedLoraTrainer(batched).run()
    for result, batched_member, alone_member in zip(results, batched, alone):
        _assert_same_run(result, _alone(alone_member), batched_member, alone_member)


def test_uneven_batches_and_ranks_take_the_split_path(tasks, encoder_v0):
    configs = [replace(CONFIG, batch_size=4), replace(CONFIG, batch_size=8, seed=5)]
    batched = [_member(encoder_v0, tasks[0], configs[0], rank=4), _member(encoder_v0, tasks[1], configs[1])]
    alone = [_member(encoder_v0, tasks[0], configs[0], rank=4), _member(encoder_v0, tasks[1], configs[1])]
    results = BatchedLoraTrainer(batched).run()
    for result, batched_member, alone_member in zip(results, batched, alone):
        _assert_same_run(result, _alone(alone_member), batched_member, alone_member)


def test_generation_members_share_a_pass(tmp_path, causal_v0):
    gen_tasks = [
        make_synthetic_task(tmp_path / f"gen{seed}", n_train=24, n_dev=6, n_test=6, seed=seed, kind="generation")
        for seed in (0, 1)
    ]
    config = replace(CONFIG, steps=4, eval_every=2)
    batched = [_member(causal_v0, task, replace(config, seed=i)) for i, task in enumerate(gen_tasks)]
    alone = [_member(causal_v0, task, replace(config, seed=i)) for i, task in enumerate(gen_tasks)]
    results = train_members(batched)
    for result, batched_member, alone_member in zip(results, batched, alone):
        _assert_same_run(result, _alone(alone_member), batched_member, alone_member)


def test_slot_evaluation_equals_the_peft_model(tasks, encoder_v0):
    members = [_member(encoder_v0, task, CONFIG) for task in tasks]
    batched = MultiLoraModel([m.student.model for m in members])
    for slot, member in enumerate(members):
        mine = evaluate(batched.slot_view(slot), member.task_format, member.dev_features, split="dev")
        reference = evaluate(member.student.model, member.task_format, member.dev_features, split="dev")
        assert mine.predictions == reference.predictions
        assert mine.score.loss == pytest.approx(reference.score.loss, rel=1e-5)


def test_a_cancelled_member_stops_alone(tasks, encoder_v0):
    seen: list[int] = []
    hooks = RunHooks(progress=lambda p: seen.append(p.step), should_cancel=lambda: bool(seen) and seen[-1] >= 2)
    members = [_member(encoder_v0, tasks[0], CONFIG, hooks=hooks), _member(encoder_v0, tasks[1], CONFIG)]
    results = train_members(members)
    assert isinstance(results[0], JobCancelled)
    assert not isinstance(results[1], JobCancelled)
    assert len(results[1].curve.train_loss) == CONFIG.steps


def test_resume_from_batched_checkpoints_matches_an_uninterrupted_run(tmp_path, tasks, encoder_v0):
    config = replace(CONFIG, checkpoint_every=2)
    reference = [_member(encoder_v0, task, config) for task in tasks[:2]]
    BatchedLoraTrainer(reference).run()

    steps: list[int] = []
    interrupted_hooks = [
        RunHooks(
            progress=lambda p: steps.append(p.step),
            should_cancel=lambda: bool(steps) and steps[-1] >= 4,
            checkpoint_dir=tmp_path / f"ckpt{i}",
        )
        for i in range(2)
    ]
    first = [_member(encoder_v0, task, config, hooks=h) for task, h in zip(tasks[:2], interrupted_hooks)]
    assert all(isinstance(r, JobCancelled) for r in train_members(first))
    resumed_hooks = [RunHooks(checkpoint_dir=tmp_path / f"ckpt{i}") for i in range(2)]
    resumed = [_member(encoder_v0, task, config, hooks=h) for task, h in zip(tasks[:2], resumed_hooks)]
    results = BatchedLoraTrainer(resumed).run()
    for result, done, again in zip(results, reference, resumed):
        assert len(result.curve.train_loss) == config.steps
        for name, tensor in _lora_weights(done).items():
            torch.testing.assert_close(_lora_weights(again)[name], tensor, rtol=1e-5, atol=1e-6, msg=name)


def test_members_on_different_bases_train_one_after_another(tasks, encoder_v0, encoder_v1):
    members = [_member(encoder_v0, tasks[0], CONFIG), _member(encoder_v1, tasks[1], CONFIG)]
    assert batched_obstacle(members) == "the adapters sit on different bases"
    results = train_members(members)
    assert all(len(r.curve.train_loss) == CONFIG.steps for r in results)


def test_cached_teacher_returns_the_same_logits_without_a_forward():
    calls: list[int] = []

    def forward(batch, with_hidden):
        calls.append(1)
        return batch.input_ids.float()[:, :2] * 2, None

    class _Batch:
        input_ids = torch.tensor([[1, 2], [3, 4]])

    teacher = CachedTeacher(forward, classification=True)
    first, _ = teacher(_Batch, False, indices=[7, 9])
    again, _ = teacher(_Batch, False, indices=[9, 7])
    assert len(calls) == 1
    torch.testing.assert_close(again, first.flip(0))


def test_adapter_mode_sweep_in_one_pass_equals_lerping_merged_weights(tasks, encoder_v0):
    from recycling_core.metrics import alphas as alpha_grid
    from recycling_core.metrics import lerp_into_
    from recycling_core.multilora import interpolation_model
    from recycling_core.tasking import evaluate_slots

    config_a, config_b = replace(CONFIG, seed=3), replace(CONFIG, seed=4)
    end_a, end_b = _member(encoder_v0, tasks[1], config_a), _member(encoder_v0, tasks[1], config_b)
    grid = alpha_grid(5)
    batched = interpolation_model(end_a.student.model, end_b.student.model, grid)
    swept = evaluate_slots(batched, end_b.task_format, end_b.dev_features, split="dev", device=torch.device("cpu"))

    merged_a, merged_b = end_a.student.merged_model(), end_b.student.merged_model()
    state_a = {k: v.clone() for k, v in merged_a.state_dict().items()}
    state_b = {k: v.clone() for k, v in merged_b.state_dict().items()}
    targets = {k: v for k, v in merged_b.state_dict().items() if torch.is_floating_point(v)}
    for alpha, result in zip(grid, swept):
        lerp_into_(targets, {k: state_a[k] for k in targets}, {k: state_b[k] for k in targets}, alpha)
        reference = evaluate(merged_b, end_b.task_format, end_b.dev_features, split="dev")
        assert result.predictions == reference.predictions
        assert result.score.loss == pytest.approx(reference.score.loss, rel=1e-4)


def test_a_batch_too_large_for_the_card_trains_one_after_another(tasks, encoder_v0, monkeypatch):
    original = BatchedLoraTrainer.run

    def run(self):
        if len(self.members) > 1:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return original(self)

    monkeypatch.setattr(BatchedLoraTrainer, "run", run)
    members = [_member(encoder_v0, task, CONFIG) for task in tasks[:2]]
    alone = [_member(encoder_v0, task, CONFIG) for task in tasks[:2]]
    results = train_members(members)
    for result, member, reference in zip(results, members, alone):
        _assert_same_run(result, _alone(reference), member, reference)
