"""The one training loop every method uses.

CUDA with bf16 autocast when present, CPU otherwise; gradient accumulation; linear warm-up then
linear or cosine decay; evaluation on dev every ``eval_every`` steps; best-checkpoint selection;
seeded data order and dropout; a progress callback; a cooperative cancel hook; checkpoints to a
directory and exact resume from them.

What differs between methods is only the starting weights of the student and whether a frozen
teacher adds a distillation term; both come in as arguments.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import torch
from safetensors.torch import load_file, save_file

from recycling_core.adaptation import AdaptedModel
from recycling_core.data import length_bucketed_batches
from recycling_core.errors import ConfigError, JobCancelled
from recycling_core.metrics import CostMeter
from recycling_core.models import BaseModelCache
from recycling_core.reports import Cost, EvalPoint, TaskScore, TrainingCurve
from recycling_core.tasking import Batch, Feature, TaskFormat, autocast_context, evaluate


@dataclass(frozen=True)
class TrainingConfig:
    """Hyperparameters of one training run."""

    steps: int = 200
    batch_size: int = 16
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    warmup_ratio: float = 0.06
    schedule: Literal["linear", "cosine", "constant"] = "linear"
    grad_accumulation: int = 1
    eval_every: int = 20
    eval_batch_size: int = 64
    max_length: int = 128
    max_grad_norm: float = 1.0
    seed: int = 0
    distill_alpha: float = 0.5
    distill_temperature: float = 2.0
    hidden_mse_weight: float = 0.0
    checkpoint_every: int | None = None
    device: Literal["auto", "cpu", "cuda"] = "auto"

    def __post_init__(self) -> None:
        positive = ("steps", "batch_size", "grad_accumulation", "eval_every", "eval_batch_size")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1", field=name)
        if not self.learning_rate > 0:
            raise ConfigError("learning_rate must be positive", field="learning_rate")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError("warmup_ratio must be in [0, 1)", field="warmup_ratio")
        if not 0.0 <= self.distill_alpha <= 1.0:
            raise ConfigError("distill_alpha must be in [0, 1]", field="distill_alpha")
        if self.distill_temperature <= 0:
            raise ConfigError("distill_temperature must be positive", field="distill_temperature")

    def fingerprint(self) -> str:
        """sha256 of the settings that change the trajectory (resume refuses a different one)."""
        payload = {k: v for k, v in asdict(self).items() if k not in ("checkpoint_every", "device")}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Progress:
    """What a progress callback receives after each optimizer step and evaluation."""

    phase: str
    step: int
    total: int
    metrics: dict[str, float]
    eta_seconds: float | None


@dataclass
class RunHooks:
    """Hooks a caller (the command line, a worker) passes into long runs."""

    progress: Callable[[Progress], None] | None = None
    should_cancel: Callable[[], bool] | None = None
    checkpoint_dir: Path | None = None
    cache: BaseModelCache | None = None
    compile_model: bool = False
    """On CUDA, train LoRA through torch.compile (a runtime choice: it changes speed, not results
    beyond float rounding; the first job on a model shape pays the compilation)."""

    def report(self, progress: Progress) -> None:
        if self.progress is not None:
            self.progress(progress)

    def check_cancel(self) -> None:
        if self.should_cancel is not None and self.should_cancel():
            raise JobCancelled("the run was cancelled")


TeacherForward = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]
"""A frozen teacher: ``(batch, with_hidden)`` → (task logits, last hidden state when asked).

A teacher that also takes the batch's example ``indices`` (like :class:`CachedTeacher`) gets
them as a keyword.
"""


def call_teacher(
    teacher: TeacherForward, batch: Batch, with_hidden: bool, indices: Sequence[int] | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if isinstance(teacher, CachedTeacher):
        return teacher(batch, with_hidden, indices=indices)
    return teacher(batch, with_hidden)


class CachedTeacher:
    """Remembers a frozen teacher's task logits per training example.

    The teacher runs in eval mode without dropout, so its logits for an example never change;
    from the second epoch on (few-shot runs see their examples dozens of times) a step costs no
    teacher forward. Only task logits of classification tasks are kept (a few floats per
    example); hidden states and generation logits are computed every time.
    """

    def __init__(self, forward: TeacherForward, classification: bool) -> None:
        self.forward = forward
        self.classification = classification
        self.cache: dict[int, torch.Tensor] = {}
        self.hits = 0
        self.misses = 0

    def __call__(
        self, batch: Batch, with_hidden: bool, indices: Sequence[int] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if with_hidden or not self.classification or indices is None:
            return self.forward(batch, with_hidden)
        if all(index in self.cache for index in indices):
            self.hits += 1
            return torch.stack([self.cache[index] for index in indices]), None
        self.misses += 1
        logits, _ = self.forward(batch, False)
        for row, index in enumerate(indices):
            self.cache[index] = logits[row].detach()
        return logits, None


@dataclass
class TrainResult:
    """The outcome of a run; the student holds the best checkpoint's weights afterwards."""

    curve: TrainingCurve
    best_dev: TaskScore | None
    steps: int
    cost: Cost
    resumed_from_step: int = 0
    extra: dict[str, float] = field(default_factory=dict)


def resolve_device(preference: str) -> torch.device:
    """``auto`` picks CUDA when present."""
    if preference == "cuda" or (preference == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError("CUDA was asked for but no CUDA device is present", field="device")
        return torch.device("cuda")
    return torch.device("cpu")


def learning_rate_factor(step: int, total: int, warmup_ratio: float, schedule: str) -> float:
    """Linear warm-up to 1, then linear or cosine decay to 0 (or constant)."""
    warmup = int(total * warmup_ratio)
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    return max(0.0, 1.0 - progress)


class MicroBatchOrder:
    """Deterministic, resumable order of training micro-batches: epoch e shuffles with seed+e."""

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int) -> None:
        if not lengths:
            raise ConfigError("the training split is empty", field="train")
        self.lengths = list(lengths)
        self.batch_size = min(batch_size, len(lengths))
        self.seed = seed

    def epoch(self, index: int) -> list[list[int]]:
        return length_bucketed_batches(self.lengths, self.batch_size, self.seed + index)

    def from_position(self, position: int):
        """Yield micro-batches (lists of example indices) starting at a global position."""
        epoch = 0
        batches = self.epoch(epoch)
        while position >= len(batches):
            position -= len(batches)
            epoch += 1
            batches = self.epoch(epoch)
        while True:
            yield from batches[position:]
            position = 0
            epoch += 1
            batches = self.epoch(epoch)


def _primary(score: TaskScore) -> float:
    return score.primary


def is_better(score: TaskScore, curve: TrainingCurve) -> bool:
    """A higher dev metric, or the same metric at a lower dev loss (the earlier step wins ties).

    The loss breaks ties because a coarse metric often stays flat for a while (exact match of a
    generation task at 0, accuracy on a small dev split) while the model clearly improves.
    """
    if curve.best_metric is None:
        return True
    if _primary(score) != curve.best_metric:
        return _primary(score) > curve.best_metric
    best_loss = next((p.loss for p in curve.points if p.step == curve.best_step), math.inf)
    return score.loss < best_loss


class Trainer:
    """Trains one adapted model on one task, optionally distilling from a frozen teacher."""

    def __init__(
        self,
        student: AdaptedModel,
        task_format: TaskFormat,
        train_features: Sequence[Feature],
        dev_features: Sequence[Feature],
        config: TrainingConfig,
        hooks: RunHooks | None = None,
        teacher: TeacherForward | None = None,
    ) -> None:
        if not dev_features:
            raise ConfigError("the dev split is empty", field="dev")
        self.student = student
        self.task_format = task_format
        self.train_features = list(train_features)
        self.dev_features = list(dev_features)
        self.config = config
        self.hooks = hooks or RunHooks()
        self.teacher = teacher
        self.device = resolve_device(config.device)
        self.student.to(self.device)
        parameters = self.student.trainable_parameters()
        if not parameters:
            raise ConfigError("the adapted model has no trainable parameters", field="peft")
        fused = self.device.type == "cuda"
        self.optimizer = torch.optim.AdamW(
            parameters, lr=config.learning_rate, weight_decay=config.weight_decay, fused=fused
        )
        self.order = MicroBatchOrder([len(f.input_ids) for f in self.train_features], config.batch_size, config.seed)

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_every(self) -> int:
        return self.config.checkpoint_every or self.config.eval_every

    def _save_checkpoint(self, step: int, curve: TrainingCurve, best_state, tokens: int) -> None:
        directory = self.hooks.checkpoint_dir
        if directory is None:
            return
        directory.mkdir(parents=True, exist_ok=True)
        staging = directory / f".staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        save_file(self.student.trainable_state(), str(staging / "trainable.safetensors"))
        if best_state is not None:
            save_file(best_state, str(staging / "best.safetensors"))
        torch.save(self.optimizer.state_dict(), staging / "optimizer.pt")
        state = {
            "step": step,
            "tokens": tokens,
            "config_fingerprint": self.config.fingerprint(),
            "curve": curve.model_dump(mode="json"),
        }
        (staging / "trainer_state.json").write_text(json.dumps(state))
        for item in staging.iterdir():
            os.replace(item, directory / item.name)
        staging.rmdir()

    def _load_checkpoint(self) -> tuple[int, TrainingCurve | None, dict | None, int]:
        directory = self.hooks.checkpoint_dir
        if directory is None or not (directory / "trainer_state.json").is_file():
            return 0, None, None, 0
        state = json.loads((directory / "trainer_state.json").read_text())
        if state.get("config_fingerprint") != self.config.fingerprint():
            raise ConfigError(
                f"checkpoint in {directory} was made with other hyperparameters; use a new directory",
                field="checkpoint_dir",
            )
        self.student.load_trainable_state(load_file(str(directory / "trainable.safetensors")))
        # The optimizer state holds only tensors and numbers; weights_only keeps pickle code out.
        optimizer_state = torch.load(directory / "optimizer.pt", map_location=self.device, weights_only=True)
        self.optimizer.load_state_dict(optimizer_state)
        best_path = directory / "best.safetensors"
        best_state = load_file(str(best_path)) if best_path.is_file() else None
        curve = TrainingCurve.model_validate(state["curve"])
        return int(state["step"]), curve, best_state, int(state.get("tokens", 0))

    # ------------------------------------------------------------------ loop
    def _evaluate(self) -> TaskScore:
        return evaluate(
            self.student.model,
            self.task_format,
            self.dev_features,
            split="dev",
            batch_size=self.config.eval_batch_size,
            device=self.device,
            exact_match=not self.task_format.classification,
        ).score

    def _loss(self, batch: Batch, indices: Sequence[int] | None = None) -> torch.Tensor:
        config = self.config
        want_hidden = self.teacher is not None and config.hidden_mse_weight > 0
        with autocast_context(self.device):
            student_logits, student_hidden = self.task_format.forward(
                self.student.model, batch, with_hidden=want_hidden
            )
            loss = self.task_format.task_loss(student_logits, batch)
            if self.teacher is not None:
                with torch.no_grad():
                    teacher_logits, teacher_hidden = call_teacher(self.teacher, batch, want_hidden, indices)
                kd = self.task_format.distillation_loss(
                    student_logits, teacher_logits, batch, config.distill_temperature
                )
                loss = (1.0 - config.distill_alpha) * loss + config.distill_alpha * kd
                if want_hidden and student_hidden is not None and teacher_hidden is not None:
                    hidden_loss = self.task_format.hidden_state_loss(student_hidden, teacher_hidden, batch)
                    loss = loss + config.hidden_mse_weight * hidden_loss
        return loss

    def run(self) -> TrainResult:
        """Train to ``config.steps`` optimizer steps (resuming from a checkpoint when present)."""
        config = self.config
        meter = CostMeter(self.device)
        meter.start()
        start_step, curve, best_state, tokens = self._load_checkpoint()
        metric_name = "accuracy" if self.task_format.classification else "exact_match"
        if curve is None:
            curve = TrainingCurve(metric_name=metric_name, eval_every=config.eval_every)
        best_dev: TaskScore | None = None
        if start_step == 0:
            score = self._evaluate()
            curve.points.append(EvalPoint(step=0, tokens=0, metric=_primary(score), loss=score.loss))
            best_dev = score
            best_state = self.student.trainable_state()
            curve.best_step, curve.best_metric = 0, _primary(score)
            self.hooks.report(Progress("train", 0, config.steps, {"dev_metric": _primary(score)}, None))
        micro_batches = self.order.from_position(start_step * config.grad_accumulation)
        self.student.model.train()
        started = time.perf_counter()
        for step in range(start_step, config.steps):
            self.hooks.check_cancel()
            torch.manual_seed(config.seed * 1_000_003 + step)
            for group in self.optimizer.param_groups:
                group["lr"] = config.learning_rate * learning_rate_factor(
                    step, config.steps, config.warmup_ratio, config.schedule
                )
            step_loss = 0.0
            for _ in range(config.grad_accumulation):
                indices = next(micro_batches)
                batch = self.task_format.collate([self.train_features[i] for i in indices], self.device)
                loss = self._loss(batch, indices) / config.grad_accumulation
                loss.backward()
                step_loss += float(loss.detach())
                tokens += batch.tokens
            if config.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(self.student.trainable_parameters(), config.max_grad_norm)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            done = step + 1
            curve.train_loss.append((done, round(step_loss, 6)))
            metrics = {"train_loss": step_loss}
            if done % config.eval_every == 0 or done == config.steps:
                score = self._evaluate()
                self.student.model.train()
                curve.points.append(EvalPoint(step=done, tokens=tokens, metric=_primary(score), loss=score.loss))
                metrics["dev_metric"] = _primary(score)
                metrics["dev_loss"] = score.loss
                if is_better(score, curve):
                    curve.best_step, curve.best_metric = done, _primary(score)
                    best_state = self.student.trainable_state()
                    best_dev = score
            if done % self._checkpoint_every() == 0 or done == config.steps:
                self._save_checkpoint(done, curve, best_state, tokens)
            elapsed = time.perf_counter() - started
            eta = elapsed / (done - start_step) * (config.steps - done)
            self.hooks.report(Progress("train", done, config.steps, metrics, eta))
        if best_state is not None:
            self.student.load_trainable_state(best_state)
        self.student.model.eval()
        if best_dev is None:
            best_dev = self._evaluate()
        meter.add_tokens(tokens)
        return TrainResult(
            curve=curve,
            best_dev=best_dev,
            steps=config.steps,
            cost=meter.stop(),
            resumed_from_step=start_step,
        )
