"""Small helpers shared by the recycling_core tests (loading, batches, logits, copies)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from peft import PeftModel
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from recycling_core.adaptation import AdaptedModel, AdapterOptions, attach_adapter
from recycling_core.adapters import ADAPTER_WEIGHTS_NAME, inspect_adapter_dir
from recycling_core.data import TaskData, load_task
from recycling_core.models import HeadSpec, LoadedBase, inspect_model_dir, load_base_model
from recycling_core.pipeline import TrainRequest, train_adapter
from recycling_core.reports import Report
from recycling_core.tasking import Batch, TaskFormat
from recycling_core.training import TrainingConfig

TRAIN_CONFIGS = {
    "encoder": TrainingConfig(steps=80, eval_every=20, batch_size=16, learning_rate=3e-2, seed=0),
    "causal": TrainingConfig(steps=30, eval_every=10, batch_size=16, learning_rate=2e-2, seed=0),
}
"""Training settings of the session LoRA adapters: enough steps to beat the untrained start.
(The post-LN tiny encoder, random and tiny, learns more slowly than the pre-norm causal LM.)"""
TRAIN_CONFIG = TRAIN_CONFIGS["causal"]

RECYCLE_CONFIG = TrainingConfig(steps=12, eval_every=4, batch_size=16, learning_rate=2e-2, seed=0)
"""Training settings of recycling runs in the method tests."""


@dataclass(frozen=True)
class TrainedAdapter:
    """An adapter trained on ``old`` for ``task``; ``new`` is the upgraded base."""

    kind: str
    old: Path
    new: Path
    task: Path
    adapter: Path
    report: Report


def train(
    base: Path,
    task: Path,
    out: Path,
    peft: str = "lora",
    config: TrainingConfig = TRAIN_CONFIG,
) -> Report:
    """Train a fresh adapter with the library's own entry point."""
    return train_adapter(
        TrainRequest(base, task, out, adapter=AdapterOptions(peft=peft), training=config)
    )


def head_of(task: TaskData) -> HeadSpec:
    return HeadSpec(labels=tuple(task.labels), generation=task.kind == "generation")


def load_base(model_dir: Path, task_dir: Path, seed: int = 0) -> LoadedBase:
    """A base model loaded for a task, exactly as the pipeline loads it."""
    return load_base_model(inspect_model_dir(model_dir), head_of(load_task(task_dir)), seed=seed)


def attach(model_dir: Path, adapter_dir: Path, task_dir: Path, seed: int = 0) -> AdaptedModel:
    """Base + adapter through the library (strict load), frozen and in eval mode."""
    adapted = attach_adapter(
        load_base(model_dir, task_dir, seed), inspect_adapter_dir(adapter_dir), trainable=False
    )
    adapted.model.eval()
    return adapted


def task_format(model_dir: Path, task_dir: Path) -> TaskFormat:
    info = inspect_model_dir(model_dir)
    from recycling_core.models import load_tokenizer

    return TaskFormat(load_task(task_dir), load_tokenizer(model_dir), info.kind)


def dev_batch(
    model_dir: Path, task_dir: Path, n: int = 12, split: str = "dev"
) -> tuple[TaskFormat, Batch]:
    """A padded batch of the first ``n`` examples of a split (varied lengths: real padding)."""
    fmt = task_format(model_dir, task_dir)
    features = fmt.encode(fmt.task.split(split)[:n])
    return fmt, fmt.collate(features, "cpu")


@torch.no_grad()
def raw_logits(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """The model's own output logits (all positions for causal LMs)."""
    model.eval()
    return model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float()


def plain_peft(model_dir: Path, adapter_dir: Path, kind: str, num_labels: int | None) -> PeftModel:
    """The adapter loaded with nothing but transformers + peft, as a user would."""
    if kind == "encoder":
        base = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=num_labels)
    else:
        base = AutoModelForCausalLM.from_pretrained(model_dir)
    model = PeftModel.from_pretrained(base, str(adapter_dir))
    model.eval()
    return model


def clone(directory: Path, destination: Path) -> Path:
    """A private copy of an adapter or model directory (tests modify copies only)."""
    shutil.copytree(directory, destination)
    return destination


def edit_adapter_tensors(adapter_dir: Path, edit) -> None:
    """Rewrite ``adapter_model.safetensors`` with ``edit(tensors) -> tensors``."""
    path = adapter_dir / ADAPTER_WEIGHTS_NAME
    tensors = edit(dict(load_file(str(path))))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))


def adapter_tensors(adapter_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(adapter_dir / ADAPTER_WEIGHTS_NAME))


def assert_report_fingerprints(
    report: Report, *, old_base: Path, new_base: Path, adapter: Path, task_dir: Path
) -> None:
    """The report names every input by sha256: both bases, the adapter and every task split."""
    by_role = {fingerprint.role: fingerprint for fingerprint in report.fingerprints}
    assert by_role["old_base"].sha256 == inspect_model_dir(old_base).fingerprint
    assert by_role["new_base"].sha256 == inspect_model_dir(new_base).fingerprint
    adapter_role = "adapter" if "adapter" in by_role else "old_adapter"
    assert by_role[adapter_role].sha256 == inspect_adapter_dir(adapter).fingerprint
    task = load_task(task_dir)
    for split in ("train", "dev", "test"):
        assert by_role[f"task:{split}"].sha256 == task.split_sha256[split]
    for fingerprint in report.fingerprints:
        assert len(fingerprint.sha256) == 64 and int(fingerprint.sha256, 16) >= 0
