"""How a task meets a model: tokenised features, batches, losses and predictions.

Encoders classify with their sequence-classification head. Causal LMs classify by label words
(the next-token logits of each label's first token after the prompt) and learn generation tasks
by the loss on response tokens only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerBase

from recycling_core.data import Example, TaskData, length_bucketed_batches
from recycling_core.errors import ConfigError
from recycling_core.metrics import task_score
from recycling_core.models import ModelKind
from recycling_core.reports import TaskScore

IGNORE_INDEX = -100
CLASSIFICATION_PROMPT = "{text}\nlabel:"


@dataclass(frozen=True)
class Feature:
    """One tokenised example: input ids, and either a class id or per-token targets."""

    input_ids: list[int]
    class_id: int = -1
    target_ids: list[int] | None = None
    response_text: str | None = None
    prompt_length: int = 0


@dataclass
class Batch:
    """A padded batch on a device."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    class_ids: torch.Tensor | None
    target_ids: torch.Tensor | None
    last_positions: torch.Tensor
    size: int

    @property
    def tokens(self) -> int:
        return int(self.attention_mask.sum().item())


@dataclass
class TaskFormat:
    """Turns task examples into model inputs and model outputs into task predictions."""

    task: TaskData
    tokenizer: PreTrainedTokenizerBase
    model_kind: ModelKind
    max_length: int = 128
    label_token_ids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.max_length < 8:
            raise ConfigError("max_length must be at least 8", field="max_length")
        if self.task.kind == "generation" and self.model_kind != "causal":
            raise ConfigError("generation tasks need a causal LM base", field="kind")
        if self.model_kind == "causal" and self.task.kind == "classification":
            self.label_token_ids = self._label_words()

    @property
    def classification(self) -> bool:
        return self.task.kind == "classification"

    def _label_words(self) -> list[int]:
        ids: list[int] = []
        for label in self.task.labels:
            pieces = self.tokenizer(" " + label, add_special_tokens=False)["input_ids"]
            if not pieces:
                raise ConfigError(f"label {label!r} has no token", field="labels")
            ids.append(pieces[0])
        if len(set(ids)) != len(ids):
            raise ConfigError(
                "two labels start with the same token; causal LMs classify by the first token "
                "of each label word",
                field="labels",
            )
        return ids

    def encode(self, examples: Sequence[Example]) -> list[Feature]:
        """Tokenise examples (truncated to ``max_length``)."""
        if self.classification:
            return [self._encode_classification(example) for example in examples]
        return [self._encode_generation(example) for example in examples]

    def _encode_classification(self, example: Example) -> Feature:
        class_id = self.task.label2id[example.label] if example.label is not None else -1
        if self.model_kind == "encoder":
            ids = self.tokenizer(example.text, truncation=True, max_length=self.max_length)["input_ids"]
            return Feature(input_ids=list(ids), class_id=class_id)
        ids = self._causal_prompt_ids(CLASSIFICATION_PROMPT.format(text=example.text), reserve=0)
        return Feature(input_ids=ids, class_id=class_id)

    def _causal_prompt_ids(self, text: str, reserve: int) -> list[int]:
        ids = list(self.tokenizer(text, add_special_tokens=True)["input_ids"])
        budget = self.max_length - reserve
        if len(ids) > budget:
            ids = ids[: 1] + ids[len(ids) - budget + 1 :] if budget > 1 else ids[-budget:]
        return ids

    def _encode_generation(self, example: Example) -> Feature:
        response = example.response or ""
        response_ids = list(self.tokenizer(" " + response, add_special_tokens=False)["input_ids"])
        if self.tokenizer.eos_token_id is not None:
            response_ids.append(self.tokenizer.eos_token_id)
        response_ids = response_ids[: max(1, self.max_length // 2)]
        prompt_ids = self._causal_prompt_ids(example.prompt, reserve=len(response_ids))
        return Feature(
            input_ids=prompt_ids + response_ids,
            target_ids=[IGNORE_INDEX] * len(prompt_ids) + response_ids,
            response_text=response,
            prompt_length=len(prompt_ids),
        )

    def collate(self, features: Sequence[Feature], device: torch.device | str, *, width: int | None = None) -> Batch:
        """Right-pad features into one batch (to ``width`` when given, else to the longest)."""
        width = max([len(feature.input_ids) for feature in features] + [width or 0])
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        input_ids = torch.full((len(features), width), pad, dtype=torch.long)
        mask = torch.zeros((len(features), width), dtype=torch.long)
        targets = None
        if not self.classification:
            targets = torch.full((len(features), width), IGNORE_INDEX, dtype=torch.long)
        for row, feature in enumerate(features):
            length = len(feature.input_ids)
            input_ids[row, :length] = torch.tensor(feature.input_ids)
            mask[row, :length] = 1
            if targets is not None and feature.target_ids is not None:
                targets[row, :length] = torch.tensor(feature.target_ids)
        class_ids = torch.tensor([f.class_id for f in features]) if self.classification else None
        return Batch(
            input_ids=input_ids.to(device),
            attention_mask=mask.to(device),
            class_ids=class_ids.to(device) if class_ids is not None else None,
            target_ids=targets.to(device) if targets is not None else None,
            last_positions=(mask.sum(dim=1) - 1).to(device),
            size=len(features),
        )

    def batches(
        self,
        features: Sequence[Feature],
        batch_size: int,
        device: torch.device | str,
        *,
        seed: int = 0,
        shuffle: bool = False,
    ) -> Iterator[Batch]:
        """Length-bucketed batches (shuffled by seed when training)."""
        if shuffle:
            order = length_bucketed_batches([len(f.input_ids) for f in features], batch_size, seed)
        else:
            order = [list(range(i, min(i + batch_size, len(features)))) for i in range(0, len(features), batch_size)]
        for indices in order:
            yield self.collate([features[i] for i in indices], device)

    def output_logits(self, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        """Logits the task reads: [batch, classes] for classification, [batch, seq, vocab] else."""
        return self.forward(model, batch)[0]

    def forward(
        self, model: torch.nn.Module, batch: Batch, *, with_hidden: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(task logits, last hidden state over the real tokens' positions or None)."""
        outputs = model(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, output_hidden_states=with_hidden
        )
        hidden = None
        if with_hidden:
            hidden = outputs.hidden_states[-1]
            hidden = hidden[:, hidden.size(1) - batch.input_ids.size(1) :]
        return self.task_logits(outputs.logits, batch), hidden

    def task_logits(self, logits: torch.Tensor, batch: Batch) -> torch.Tensor:
        """What the task reads off a model's raw output logits for this batch."""
        if logits.dim() == 3 and logits.size(1) > batch.input_ids.size(1):
            logits = logits[:, logits.size(1) - batch.input_ids.size(1) :]  # prompt-tuning tokens
        if not self.classification:
            return logits
        if self.model_kind == "encoder":
            return logits
        rows = torch.arange(batch.size, device=logits.device)
        last = logits[rows, batch.last_positions]
        return last[:, self.label_token_ids]

    def task_loss(self, logits: torch.Tensor, batch: Batch, reduction: str = "mean") -> torch.Tensor:
        """Cross-entropy on classes, or on response tokens (next-token shifted)."""
        if self.classification:
            assert batch.class_ids is not None
            return F.cross_entropy(logits.float(), batch.class_ids, reduction=reduction)
        assert batch.target_ids is not None
        shifted_logits = logits[:, :-1].float()
        shifted_targets = batch.target_ids[:, 1:]
        per_token = F.cross_entropy(
            shifted_logits.reshape(-1, shifted_logits.size(-1)),
            shifted_targets.reshape(-1),
            ignore_index=IGNORE_INDEX,
            reduction="none",
        ).view(shifted_targets.shape)
        counts = (shifted_targets != IGNORE_INDEX).sum(dim=1).clamp(min=1)
        per_example = per_token.sum(dim=1) / counts
        if reduction == "none":
            return per_example
        if reduction == "sum":
            return per_example.sum()
        return per_example.mean()

    @staticmethod
    def hidden_state_loss(student: torch.Tensor, teacher: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Mean squared error between last hidden states over real tokens."""
        mask = batch.attention_mask.bool()
        return F.mse_loss(student[mask].float(), teacher[mask].float())

    def distillation_loss(
        self, student_logits: torch.Tensor, teacher_logits: torch.Tensor, batch: Batch, temperature: float
    ) -> torch.Tensor:
        """T²·KL(teacher_T ‖ student_T), averaged per example (per response token for generation)."""
        t = temperature
        if self.classification:
            teacher = F.log_softmax(teacher_logits.float() / t, dim=-1)
            student = F.log_softmax(student_logits.float() / t, dim=-1)
            kl = F.kl_div(student, teacher, log_target=True, reduction="none").sum(dim=-1)
            return kl.mean() * t * t
        assert batch.target_ids is not None
        positions = batch.target_ids[:, 1:] != IGNORE_INDEX
        teacher = F.log_softmax(teacher_logits[:, :-1][positions].float() / t, dim=-1)
        student = F.log_softmax(student_logits[:, :-1][positions].float() / t, dim=-1)
        kl = F.kl_div(student, teacher, log_target=True, reduction="none").sum(dim=-1)
        return kl.mean() * t * t


@dataclass
class EvalResult:
    """Predictions and loss of one model on one split."""

    score: TaskScore
    predictions: list[int] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    predicted_texts: list[str] = field(default_factory=list)
    tokens: int = 0


def autocast_context(device: torch.device):
    """bf16 autocast on CUDA, nothing on CPU."""
    if device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return torch.autocast(device_type="cpu", enabled=False)


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    task_format: TaskFormat,
    features: Sequence[Feature],
    *,
    split: str,
    batch_size: int = 32,
    device: torch.device | None = None,
    exact_match: bool = True,
) -> EvalResult:
    """Loss and task metric of a model on features of one split."""
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    losses: list[float] = []
    predictions: list[int] = []
    labels: list[int] = []
    tokens = 0
    for batch in task_format.batches(features, batch_size, device):
        with autocast_context(device):
            logits = task_format.output_logits(model, batch)
        losses.extend(task_format.task_loss(logits, batch, reduction="none").tolist())
        tokens += batch.tokens
        if task_format.classification:
            assert batch.class_ids is not None
            predictions.extend(logits.argmax(dim=-1).tolist())
            labels.extend(batch.class_ids.tolist())
    mean_loss = float(sum(losses) / max(len(losses), 1))
    if not math.isfinite(mean_loss):
        mean_loss = float("inf")
    if task_format.classification:
        score = task_score(
            split,
            mean_loss,
            preds=predictions,
            labels=labels,
            num_labels=len(task_format.task.labels),
        )
        result = EvalResult(score=score, predictions=predictions, labels=labels, tokens=tokens)
    else:
        texts: list[str] = []
        if exact_match:
            texts = greedy_responses(model, task_format, features, batch_size=batch_size, device=device)
        references = [feature.response_text or "" for feature in features]
        score = task_score(
            split,
            mean_loss,
            predicted_texts=texts if exact_match else None,
            reference_texts=references if exact_match else None,
        )
        result = EvalResult(score=score, predicted_texts=texts, tokens=tokens)
    model.train(was_training)
    return result


@torch.no_grad()
def evaluate_slots(
    model,
    task_format: TaskFormat,
    features: Sequence[Feature],
    *,
    split: str,
    batch_size: int = 32,
    device: torch.device,
) -> list[EvalResult]:
    """Evaluate every slot of a batched multi-LoRA model on the same features in one pass each batch.

    Each batch is repeated once per slot and routed so that copy i goes through slot i; the
    frozen base is read once per batch for all slots. Classification only (generation metrics
    need decoding per model).
    """
    if not task_format.classification:
        raise ConfigError("batched evaluation covers classification tasks", field="kind")
    slots = model.slots
    was_training = model.training
    model.eval()
    losses: list[list[float]] = [[] for _ in range(slots)]
    predictions: list[list[int]] = [[] for _ in range(slots)]
    labels: list[int] = []
    tokens = 0
    for batch in task_format.batches(features, batch_size, device):
        model.route(sizes=[batch.size] * slots)
        with autocast_context(device):
            raw = model(
                input_ids=batch.input_ids.repeat(slots, 1), attention_mask=batch.attention_mask.repeat(slots, 1)
            ).logits
        for slot, rows in enumerate(torch.split(raw, batch.size, dim=0)):
            width = model.head_output_width(slot)
            logits = task_format.task_logits(rows[:, :width] if width and rows.dim() == 2 else rows, batch)
            losses[slot].extend(task_format.task_loss(logits, batch, reduction="none").tolist())
            predictions[slot].extend(logits.argmax(dim=-1).tolist())
        assert batch.class_ids is not None
        labels.extend(batch.class_ids.tolist())
        tokens += batch.tokens * slots
    model.train(was_training)
    results = []
    for slot in range(slots):
        mean_loss = float(sum(losses[slot]) / max(len(losses[slot]), 1))
        score = task_score(
            split,
            mean_loss if math.isfinite(mean_loss) else float("inf"),
            preds=predictions[slot],
            labels=labels,
            num_labels=len(task_format.task.labels),
        )
        results.append(EvalResult(score=score, predictions=predictions[slot], labels=labels, tokens=tokens // slots))
    return results


@torch.no_grad()
def greedy_responses(
    model: torch.nn.Module,
    task_format: TaskFormat,
    features: Sequence[Feature],
    *,
    batch_size: int,
    device: torch.device,
) -> list[str]:
    """Greedy decoding of each prompt, up to the reference response's length plus a margin."""
    tokenizer = task_format.tokenizer
    eos = tokenizer.eos_token_id
    texts: list[str] = []
    for start in range(0, len(features), batch_size):
        chunk = features[start : start + batch_size]
        prompts = [feature.input_ids[: feature.prompt_length] for feature in chunk]
        limit = max(len(feature.input_ids) - feature.prompt_length for feature in chunk) + 2
        sequences = [list(prompt) for prompt in prompts]
        finished = [False] * len(chunk)
        for _ in range(limit):
            width = max(len(s) for s in sequences)
            pad = tokenizer.pad_token_id or 0
            ids = torch.full((len(sequences), width), pad, dtype=torch.long, device=device)
            mask = torch.zeros_like(ids)
            for row, sequence in enumerate(sequences):
                ids[row, : len(sequence)] = torch.tensor(sequence, device=device)
                mask[row, : len(sequence)] = 1
            with autocast_context(device):
                logits = model(input_ids=ids, attention_mask=mask).logits
            logits = logits[:, logits.size(1) - ids.size(1) :]
            last = (mask.sum(dim=1) - 1)
            next_ids = logits[torch.arange(len(sequences), device=device), last].argmax(dim=-1).tolist()
            for row, token in enumerate(next_ids):
                if finished[row]:
                    continue
                if token == eos:
                    finished[row] = True
                else:
                    sequences[row].append(token)
            if all(finished):
                break
        for prompt, sequence in zip(prompts, sequences):
            texts.append(tokenizer.decode(sequence[len(prompt) :], skip_special_tokens=True).strip())
    return texts
