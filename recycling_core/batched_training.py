"""Training several LoRA adapters of one base in one batched pass (and single LoRA runs too).

:func:`train_members` is what the pipeline calls. LoRA members on one base go through
:class:`BatchedLoraTrainer`: one frozen base for all (its linear weights stored in bf16 on CUDA,
so autocast does not cast them on every forward), each member's rows through its own LoRA path,
one fused AdamW over the stacked tensors (element-wise, so the same as one optimizer each),
gradient clipping per member. Every member keeps its own data order, dev evaluation, best
checkpoint, progress, cancel and checkpoint directory. Other adapter types, or members that
cannot share a pass, train one after another with :class:`~recycling_core.training.Trainer`.

Dropout draws one mask for the whole batch, so a member with dropout follows the same
distribution as when trained alone but not the same random numbers; without dropout it follows
the same trajectory up to floating-point rounding.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from safetensors.torch import load_file, save_file

from recycling_core.adaptation import AdaptedModel
from recycling_core.errors import ConfigError, JobCancelled
from recycling_core.metrics import CostMeter
from recycling_core.multilora import MultiLoraModel, batching_obstacle
from recycling_core.reports import Cost, EvalPoint, TaskScore, TrainingCurve
from recycling_core.tasking import Batch, Feature, TaskFormat, autocast_context, evaluate
from recycling_core.training import (
    MicroBatchOrder,
    Progress,
    RunHooks,
    TeacherForward,
    Trainer,
    TrainingConfig,
    TrainResult,
    call_teacher,
    is_better,
    learning_rate_factor,
    resolve_device,
)

STATE_NAME = "batched_trainer_state.json"
WEIGHTS_NAME = "batched_trainable.safetensors"
MOMENTS_NAME = "batched_optimizer.safetensors"
BEST_NAME = "batched_best.safetensors"

SHARED_SCHEDULE = (
    "steps", "learning_rate", "weight_decay", "warmup_ratio", "schedule", "grad_accumulation",
    "eval_every", "max_grad_norm", "device",
)  # fmt: skip
"""Settings every member of one batched pass must share (they drive the one optimizer)."""


@dataclass
class TrainingMember:
    """One adapter to train: its student, data, settings, hooks and optional frozen teacher."""

    student: AdaptedModel
    task_format: TaskFormat
    train_features: Sequence[Feature]
    dev_features: Sequence[Feature]
    config: TrainingConfig
    hooks: RunHooks = field(default_factory=RunHooks)
    teacher: TeacherForward | None = None


def batched_obstacle(members: Sequence[TrainingMember]) -> str | None:
    """Why these members cannot train in one batched pass, or None when they can."""
    if not members:
        return "no members"
    reference = members[0].config
    for name in SHARED_SCHEDULE:
        if any(getattr(member.config, name) != getattr(reference, name) for member in members):
            return f"the members differ in {name}"
    if any(not member.dev_features for member in members):
        return "a member has no dev split"
    kinds = {member.task_format.model_kind for member in members}
    if len(kinds) != 1:
        return "the members mix model kinds"
    return batching_obstacle(
        [member.student.model for member in members],
        [member.student.base.info.fingerprint for member in members],
    )


def checkpoint_step(hooks: RunHooks) -> int:
    """The step a member's checkpoint directory would resume from (0 when none)."""
    directory = hooks.checkpoint_dir
    if directory is None or not (directory / STATE_NAME).is_file():
        return 0
    return int(json.loads((directory / STATE_NAME).read_text()).get("step", 0))


def train_members(members: Sequence[TrainingMember]) -> list[TrainResult | JobCancelled]:
    """Train every member: one batched pass when they can share it, else one after another.

    A member cancelled through its hooks gets :class:`JobCancelled` in its place of the result
    list; the others go on.
    """
    if not members:
        return []
    resume_steps = {checkpoint_step(member.hooks) for member in members}
    compile_model = any(member.hooks.compile_model for member in members)
    if batched_obstacle(members) is not None:
        return _one_by_one(members, lambda member: Trainer(
            member.student, member.task_format, member.train_features, member.dev_features,
            member.config, member.hooks, teacher=member.teacher,
        ).run())  # fmt: skip

    def alone() -> list[TrainResult | JobCancelled]:
        return _one_by_one(members, lambda member: BatchedLoraTrainer([member], compile_model=compile_model).run()[0])

    if len(members) == 1:
        return BatchedLoraTrainer(members, compile_model=compile_model).run()
    if resume_steps != {0}:  # checkpoints of different attempts: each resumes on its own
        return alone()
    try:
        return BatchedLoraTrainer(members, compile_model=compile_model).run()
    except torch.OutOfMemoryError:
        # The batched pass needs about N times one job's activation memory; when the card has
        # less, the members train one after another (each resumes from its own checkpoints).
        gc.collect()
        torch.cuda.empty_cache()
        return alone()


def _one_by_one(
    members: Sequence[TrainingMember], train: Callable[[TrainingMember], TrainResult]
) -> list[TrainResult | JobCancelled]:
    results: list[TrainResult | JobCancelled] = []
    for member in members:
        try:
            results.append(train(member))
        except JobCancelled as cancelled:
            results.append(cancelled)
    return results


@dataclass
class _MemberRun:
    member: TrainingMember
    order: MicroBatchOrder
    curve: TrainingCurve
    best_state: dict[str, torch.Tensor] | None = None
    best_dev: TaskScore | None = None
    tokens: int = 0
    cancelled: JobCancelled | None = None


class BatchedLoraTrainer:
    """Trains LoRA members of one base in one pass; see the module's docstring."""

    def __init__(self, members: Sequence[TrainingMember], *, compile_model: bool = False) -> None:
        obstacle = batched_obstacle(members)
        if obstacle is not None:
            raise ConfigError(f"these adapters cannot be trained in one pass: {obstacle}", field="adapters")
        self.members = list(members)
        self.config = members[0].config
        self.device = resolve_device(self.config.device)
        base_dtype = torch.bfloat16 if self.device.type == "cuda" else None
        self.model = MultiLoraModel([m.student.model for m in members], base_dtype=base_dtype)  # type: ignore[misc]
        if self.device.type == "cuda":
            self.model.use_fast_attention()
        self.model.to(self.device)
        # torch.compile fuses the element-wise work around the matrix products (training forward
        # and backward only; evaluation runs the same weights uncompiled)
        # Only single-adapter runs are compiled: compiling the multi-slot graph took longer than a
        # whole batched run in the benchmark (docs/benchmarks/performance.md).
        compiled = compile_model and self.device.type == "cuda" and len(self.members) == 1
        self.forward_model = torch.compile(self.model.model) if compiled else self.model.model
        self.optimizer = torch.optim.AdamW(
            self.model.slot_parameters(),
            lr=self.config.learning_rate,
            weight_decay=self.config.weight_decay,
            fused=self.device.type == "cuda",
        )
        self.runs = []
        for member in members:
            metric = "accuracy" if member.task_format.classification else "exact_match"
            lengths = [len(f.input_ids) for f in member.train_features]
            self.runs.append(
                _MemberRun(
                    member=member,
                    order=MicroBatchOrder(lengths, member.config.batch_size, member.config.seed),
                    curve=TrainingCurve(metric_name=metric, eval_every=self.config.eval_every),
                )
            )

    # ------------------------------------------------------------------ evaluation
    def _evaluate(self, slot: int) -> TaskScore:
        member = self.members[slot]
        return evaluate(
            self.model.slot_view(slot),  # type: ignore[arg-type]
            member.task_format,
            member.dev_features,
            split="dev",
            batch_size=member.config.eval_batch_size,
            device=self.device,
            exact_match=not member.task_format.classification,
        ).score

    def _record_eval(self, slot: int, step: int) -> TaskScore:
        run = self.runs[slot]
        score = self._evaluate(slot)
        run.curve.points.append(EvalPoint(step=step, tokens=run.tokens, metric=score.primary, loss=score.loss))
        if step == 0 or is_better(score, run.curve):
            run.curve.best_step, run.curve.best_metric = step, score.primary
            run.best_state = self.model.slot_state(slot)
            run.best_dev = score
        return score

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self, slot: int, step: int) -> None:
        run = self.runs[slot]
        directory = run.member.hooks.checkpoint_dir
        if directory is None or run.cancelled is not None:
            return
        directory.mkdir(parents=True, exist_ok=True)
        staging = directory / f".staging-{os.getpid()}-{slot}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        save_file(self.model.slot_state(slot), str(staging / WEIGHTS_NAME))
        if run.best_state is not None:
            save_file(run.best_state, str(staging / BEST_NAME))
        save_file(self._slot_moments(slot), str(staging / MOMENTS_NAME))
        state = {
            "step": step,
            "tokens": run.tokens,
            "config_fingerprint": run.member.config.fingerprint(),
            "curve": run.curve.model_dump(mode="json"),
            "best_dev": run.best_dev.model_dump(mode="json") if run.best_dev else None,
        }
        (staging / STATE_NAME).write_text(json.dumps(state))
        for item in staging.iterdir():
            os.replace(item, directory / item.name)
        staging.rmdir()

    def _slot_moments(self, slot: int) -> dict[str, torch.Tensor]:
        moments: dict[str, torch.Tensor] = {}
        for name, tensor, stacked in self.model.named_slot_tensors(slot):
            state = self.optimizer.state.get(tensor)
            if not state:
                continue
            for key in ("exp_avg", "exp_avg_sq"):
                value = state[key][slot] if stacked else state[key]
                moments[f"{name}.{key}"] = value.detach().to("cpu", copy=True).contiguous()
            moments[f"{name}.step"] = torch.as_tensor(state["step"], dtype=torch.float32).reshape(1).cpu()
        return moments

    @torch.no_grad()
    def _load_moments(self, slot: int, moments: dict[str, torch.Tensor]) -> None:
        for name, tensor, stacked in self.model.named_slot_tensors(slot):
            if f"{name}.exp_avg" not in moments:
                continue
            state = self.optimizer.state[tensor]
            if not state:
                state["step"] = torch.zeros((), dtype=torch.float32, device=tensor.device)
                state["exp_avg"] = torch.zeros_like(tensor, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(tensor, memory_format=torch.preserve_format)
            state["step"].fill_(float(moments[f"{name}.step"][0]))
            for key in ("exp_avg", "exp_avg_sq"):
                target = state[key][slot] if stacked else state[key]
                target.copy_(moments[f"{name}.{key}"].to(target.device, target.dtype))

    def _resume(self) -> int:
        """Load every member's checkpoint; all must stand at the same step."""
        steps = {checkpoint_step(run.member.hooks) for run in self.runs}
        if steps == {0}:
            return 0
        if len(steps) != 1:
            raise ConfigError("batched members stand at different checkpoint steps", field="checkpoint_dir")
        for slot, run in enumerate(self.runs):
            directory = run.member.hooks.checkpoint_dir
            assert directory is not None
            state = json.loads((directory / STATE_NAME).read_text())
            if state.get("config_fingerprint") != run.member.config.fingerprint():
                raise ConfigError(
                    f"checkpoint in {directory} was made with other hyperparameters; use a new directory",
                    field="checkpoint_dir",
                )
            self.model.load_slot_state(slot, load_file(str(directory / WEIGHTS_NAME)))
            self._load_moments(slot, load_file(str(directory / MOMENTS_NAME)))
            best = directory / BEST_NAME
            run.best_state = load_file(str(best)) if best.is_file() else None
            run.curve = TrainingCurve.model_validate(state["curve"])
            run.best_dev = TaskScore.model_validate(state["best_dev"]) if state.get("best_dev") else None
            run.tokens = int(state.get("tokens", 0))
        return steps.pop()

    # ------------------------------------------------------------------ one step
    def _active_slots(self) -> list[int]:
        return [slot for slot, run in enumerate(self.runs) if run.cancelled is None]

    def _check_cancels(self) -> None:
        for run in self.runs:
            if run.cancelled is None:
                try:
                    run.member.hooks.check_cancel()
                except JobCancelled as cancelled:
                    run.cancelled = cancelled

    def _micro_step(self, iterators: list, step_scale: float) -> tuple[list[float], list[int]]:
        """One forward/backward over a micro-batch of every active member; returns losses and tokens."""
        slots = self._active_slots()
        indices = {slot: next(iterators[slot]) for slot in slots}
        features = {slot: [self.members[slot].train_features[i] for i in indices[slot]] for slot in slots}
        width = max(len(f.input_ids) for rows in features.values() for f in rows)
        batches = {slot: self.members[slot].task_format.collate(features[slot], self.device, width=width) for slot in slots}
        sizes = [batches[slot].size if slot in batches else 0 for slot in range(len(self.runs))]
        input_ids = torch.cat([batches[slot].input_ids for slot in slots])
        attention_mask = torch.cat([batches[slot].attention_mask for slot in slots])
        want_hidden = any(
            self.members[slot].teacher is not None and self.members[slot].config.hidden_mse_weight > 0 for slot in slots
        )
        self.model.route(sizes=sizes)
        detached: dict[int, torch.Tensor] = {}
        with autocast_context(self.device):
            outputs = self.forward_model(
                input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=want_hidden
            )
            logits_rows = torch.split(outputs.logits, [sizes[s] for s in slots], dim=0)
            hidden_rows = torch.split(outputs.hidden_states[-1], [sizes[s] for s in slots]) if want_hidden else None
            total = None
            for position, slot in enumerate(slots):
                member, batch = self.members[slot], batches[slot]
                raw = logits_rows[position]
                width_out = self.model.head_output_width(slot)
                if width_out is not None and raw.dim() == 2:
                    raw = raw[:, :width_out]
                logits = member.task_format.task_logits(raw, batch)
                hidden = hidden_rows[position] if hidden_rows is not None else None
                loss = self._member_loss(member, batch, logits, hidden, indices[slot])
                loss = loss * step_scale
                total = loss if total is None else total + loss
                detached[slot] = loss.detach()
        if total is not None:
            total.backward()
        # Read back only after backward is queued: a host read in the loop above would make the
        # CPU wait for the whole forward pass before it could launch any backward kernel.
        losses = [float(detached[slot]) if slot in detached else 0.0 for slot in range(len(self.runs))]
        tokens = [batches[slot].tokens if slot in batches else 0 for slot in range(len(self.runs))]
        return losses, tokens

    def _member_loss(self, member: TrainingMember, batch: Batch, logits, hidden, indices: list[int]) -> torch.Tensor:
        config = member.config
        loss = member.task_format.task_loss(logits, batch)
        if member.teacher is None:
            return loss
        want_hidden = config.hidden_mse_weight > 0
        with torch.no_grad():
            teacher_logits, teacher_hidden = call_teacher(member.teacher, batch, want_hidden, indices)
        kd = member.task_format.distillation_loss(logits, teacher_logits, batch, config.distill_temperature)
        loss = (1.0 - config.distill_alpha) * loss + config.distill_alpha * kd
        if want_hidden and hidden is not None and teacher_hidden is not None:
            loss = loss + config.hidden_mse_weight * member.task_format.hidden_state_loss(hidden, teacher_hidden, batch)
        return loss

    # ------------------------------------------------------------------ loop
    def run(self) -> list[TrainResult | JobCancelled]:
        config = self.config
        meter = CostMeter(self.device)
        meter.start()
        start_step = self._resume()
        if start_step == 0:
            for slot, run in enumerate(self.runs):
                score = self._record_eval(slot, 0)
                run.member.hooks.report(Progress("train", 0, config.steps, {"dev_metric": score.primary}, None))
        iterators = [
            run.order.from_position(start_step * config.grad_accumulation) for run in self.runs
        ]
        self.model.train()
        started = time.perf_counter()
        for step in range(start_step, config.steps):
            self._check_cancels()
            if not self._active_slots():
                break
            torch.manual_seed(self.members[0].config.seed * 1_000_003 + step)
            for group in self.optimizer.param_groups:
                group["lr"] = config.learning_rate * learning_rate_factor(
                    step, config.steps, config.warmup_ratio, config.schedule
                )
            step_losses = [0.0] * len(self.runs)
            for _ in range(config.grad_accumulation):
                losses, tokens = self._micro_step(iterators, 1.0 / config.grad_accumulation)
                for slot in range(len(self.runs)):
                    step_losses[slot] += losses[slot]
                    self.runs[slot].tokens += tokens[slot]
            if config.max_grad_norm > 0:
                self.model.clip_grad_norm_per_slot(config.max_grad_norm)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            done = step + 1
            elapsed = time.perf_counter() - started
            eta = elapsed / (done - start_step) * (config.steps - done)
            for slot in self._active_slots():
                run = self.runs[slot]
                run.curve.train_loss.append((done, round(step_losses[slot], 6)))
                metrics = {"train_loss": step_losses[slot]}
                if done % config.eval_every == 0 or done == config.steps:
                    score = self._record_eval(slot, done)
                    self.model.train()
                    metrics.update(dev_metric=score.primary, dev_loss=score.loss)
                checkpoint_every = run.member.config.checkpoint_every or config.eval_every
                if done % checkpoint_every == 0 or done == config.steps:
                    self._save_checkpoint(slot, done)
                run.member.hooks.report(Progress("train", done, config.steps, metrics, eta))
        return self._finish(meter)

    def _finish(self, meter: CostMeter) -> list[TrainResult | JobCancelled]:
        self.model.eval()
        for slot, run in enumerate(self.runs):
            if run.cancelled is None and run.best_state is not None:
                self.model.load_slot_state(slot, run.best_state)
            if run.cancelled is None and run.best_dev is None:
                run.best_dev = self._evaluate(slot)
        self.model.push_to_members()
        for run in self.runs:
            run.member.student.model.eval()
        shared = meter.stop()
        all_tokens = sum(run.tokens for run in self.runs) or 1
        results: list[TrainResult | JobCancelled] = []
        for run in self.runs:
            if run.cancelled is not None:
                results.append(run.cancelled)
                continue
            share = run.tokens / all_tokens
            cost = Cost(
                wall_seconds=shared.wall_seconds * share,
                device_seconds=shared.device_seconds * share,
                tokens=run.tokens,
                peak_memory_bytes=shared.peak_memory_bytes,
            )
            results.append(
                TrainResult(
                    curve=run.curve,
                    best_dev=run.best_dev,
                    steps=self.config.steps,
                    cost=cost,
                    extra={"batched_with": float(len(self.runs)), "batch_wall_seconds": shared.wall_seconds},
                )
            )
        if len(self.runs) == 1 and isinstance(results[0], JobCancelled):
            raise results[0]
        return results
