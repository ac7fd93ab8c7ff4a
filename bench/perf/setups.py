"""The models, adapters and synthetic batches of the performance benchmark.

Models are built from configs with seeded random weights (speed does not depend on the weights):
a BERT-base-size encoder classifier, a Llama model with SmolLM2-135M's config and one with
TinyLlama-1.1B's config. Dropout is off in every model so that the baseline and ours, given the
same seed, must produce the same loss curve. ``--quick`` swaps in tiny configs for a CPU smoke run.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
from transformers import BertConfig, BertForSequenceClassification, LlamaConfig, LlamaForCausalLM

from recycling_core.adaptation import AdaptedModel, AdapterOptions, new_adapter
from recycling_core.batched_training import TrainingMember
from recycling_core.data import TaskData
from recycling_core.models import LoadedBase, ModelInfo
from recycling_core.tasking import Feature, TaskFormat
from recycling_core.training import MicroBatchOrder, TrainingConfig

ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
NUM_LABELS = 4


@dataclass(frozen=True)
class Setup:
    name: str
    kind: str  # encoder | causal
    config: dict
    seq: int
    batch: int
    lora_rank: int
    lora_alpha: int
    targets: tuple[str, ...]
    steps: int = 30
    warmup_steps: int = 5

    def model_config(self):
        if self.kind == "encoder":
            return BertConfig(**self.config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                              num_labels=NUM_LABELS)
        return LlamaConfig(**self.config, attention_dropout=0.0)


SETUPS = {
    "bert-base": Setup(
        "bert-base", "encoder",
        dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
             intermediate_size=3072, max_position_embeddings=512),
        seq=128, batch=32, lora_rank=8, lora_alpha=16, targets=("query", "value"), steps=60, warmup_steps=10,
    ),
    "smollm2-135m": Setup(
        "smollm2-135m", "causal",
        dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
             num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, rope_theta=100000.0,
             tie_word_embeddings=True, rms_norm_eps=1e-5),
        seq=512, batch=16, lora_rank=16, lora_alpha=32, targets=ALL_LINEAR, steps=40, warmup_steps=8,
    ),
    "tinyllama-1.1b": Setup(
        "tinyllama-1.1b", "causal",
        dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
             num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048, rope_theta=10000.0,
             tie_word_embeddings=False, rms_norm_eps=1e-5),
        seq=1024, batch=8, lora_rank=16, lora_alpha=32, targets=ALL_LINEAR, steps=30, warmup_steps=6,
    ),
}

QUICK_SETUPS = {
    "bert-base": Setup(
        "bert-base", "encoder",
        dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             max_position_embeddings=64),
        seq=32, batch=4, lora_rank=8, lora_alpha=16, targets=("query", "value"), steps=6, warmup_steps=2,
    ),
    "smollm2-135m": Setup(
        "smollm2-135m", "causal",
        dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=True),
        seq=32, batch=4, lora_rank=16, lora_alpha=32, targets=ALL_LINEAR, steps=6, warmup_steps=2,
    ),
    "tinyllama-1.1b": Setup(
        "tinyllama-1.1b", "causal",
        dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False),
        seq=32, batch=4, lora_rank=16, lora_alpha=32, targets=ALL_LINEAR, steps=6, warmup_steps=2,
    ),
}


def build_model(setup: Setup, seed: int, device: torch.device) -> torch.nn.Module:
    """The model of a setup with seeded random weights (the same seed gives the same weights)."""
    torch.manual_seed(seed)
    config = setup.model_config()
    config._attn_implementation = "sdpa"
    model_class = BertForSequenceClassification if setup.kind == "encoder" else LlamaForCausalLM
    if device.type == "meta":  # shapes only (FLOP counts)
        with torch.device("meta"):
            return model_class(config)
    return model_class(config).to(device)


def _task(setup: Setup) -> TaskData:
    labels = tuple(f"label{i}" for i in range(NUM_LABELS)) if setup.kind == "encoder" else ()
    return TaskData(
        name=f"synthetic-{setup.name}",
        kind="classification" if setup.kind == "encoder" else "generation",
        labels=labels,
        label2id={label: i for i, label in enumerate(labels)},
        id2label=dict(enumerate(labels)),
        train=[], dev=[], test=[],
        directory=Path("."),
        metric="accuracy" if setup.kind == "encoder" else "loss",
    )  # fmt: skip


def task_format(setup: Setup) -> TaskFormat:
    """Encoders: 4-way classification; causal LMs: next-token loss on every position."""
    tokenizer = SimpleNamespace(
        pad_token_id=0, eos_token_id=None, decode=lambda ids, skip_special_tokens=True: " ".join(map(str, ids))
    )
    return TaskFormat(_task(setup), tokenizer, setup.kind, max_length=setup.seq)  # type: ignore[arg-type]


def synthetic_features(setup: Setup, count: int, seed: int) -> list[Feature]:
    """Random full-length sequences (ids above the special range) with random classes."""
    generator = torch.Generator().manual_seed(seed)
    vocab = setup.config["vocab_size"]
    ids = torch.randint(5, vocab, (count, setup.seq), generator=generator)
    if setup.kind == "encoder":
        classes = torch.randint(0, NUM_LABELS, (count,), generator=generator)
        return [Feature(input_ids=row.tolist(), class_id=int(c)) for row, c in zip(ids, classes)]
    return [Feature(input_ids=row.tolist(), target_ids=row.tolist(), prompt_length=0) for row in ids]


def synthetic_dev_features(setup: Setup, count: int, seed: int) -> list[Feature]:
    """Like the training features; causal ones score their last 2 tokens (a short greedy decode)."""
    features = synthetic_features(setup, count, seed)
    if setup.kind == "encoder":
        return features
    keep = setup.seq - 2
    return [
        Feature(input_ids=f.input_ids, target_ids=[-100] * keep + f.input_ids[keep:], prompt_length=keep, response_text="")
        for f in features
    ]


def training_config(setup: Setup, steps: int, seed: int, device: str) -> TrainingConfig:
    """Constant learning rate, no clipping, evaluation only at the start and the end."""
    return TrainingConfig(
        steps=steps, batch_size=setup.batch, learning_rate=1e-4, warmup_ratio=0.0, schedule="constant",
        eval_every=steps, eval_batch_size=setup.batch, max_length=setup.seq, max_grad_norm=0.0, seed=seed,
        device=device,
    )  # fmt: skip


def batch_order(features: list[Feature], setup: Setup, seed: int, steps: int) -> list[list[int]]:
    """The micro-batches ours draws (the baseline is fed the very same ones)."""
    iterator = MicroBatchOrder([len(f.input_ids) for f in features], setup.batch, seed).from_position(0)
    return [next(iterator) for _ in range(steps)]


def adapter_options(setup: Setup) -> AdapterOptions:
    return AdapterOptions(peft="lora", lora_rank=setup.lora_rank, lora_alpha=setup.lora_alpha, target_modules=setup.targets)


def adapted(setup: Setup, model: torch.nn.Module, seed: int) -> AdaptedModel:
    """Our adapter on a model (LoRA A drawn from ``seed``, as a service job draws it)."""
    info = ModelInfo(
        path=Path("."), kind=setup.kind, model_type=model.config.model_type, model_class=type(model).__name__,  # type: ignore[arg-type]
        signature={}, manifest={}, fingerprint=f"bench-{setup.name}",
    )  # fmt: skip
    base = LoadedBase(info=info, model=model, tokenizer=None)  # type: ignore[arg-type]
    label2id = {f"label{i}": i for i in range(NUM_LABELS)} if setup.kind == "encoder" else None
    return new_adapter(base, adapter_options(setup), label2id, seed=seed)


def member(
    setup: Setup, base_model: torch.nn.Module, seed: int, steps: int, device: str, *, copy_base: bool = True, hooks=None
) -> TrainingMember:
    """One recycling job's training: its own copy of the base, adapter, data and settings."""
    from recycling_core.training import RunHooks

    model = copy.deepcopy(base_model) if copy_base else base_model
    formatter = task_format(setup)
    config = training_config(setup, steps, seed, device)
    train = synthetic_features(setup, setup.batch * 8, seed)
    dev = synthetic_dev_features(setup, setup.batch, seed + 10_000)
    return TrainingMember(adapted(setup, model, seed), formatter, train, dev, config, hooks or RunHooks())
