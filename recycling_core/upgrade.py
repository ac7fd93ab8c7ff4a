"""The upgrade simulator: continual pre-training of a base model on a text corpus.

Encoders continue with masked-LM (an MLM head is initialised when the checkpoint lacks one: the
decoder stays tied to the word embeddings and the head is first warmed with the encoder frozen);
causal LMs continue with next-token prediction. The result is a normal Hugging Face directory
(safetensors weights, tokenizer) plus ``upgrade_report.json`` with the relative weight change and
held-out LM loss before and after on the corpus and on any extra evaluation corpora.
"""

from __future__ import annotations

import gzip
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, PreTrainedTokenizerBase

from recycling_core.errors import ConfigError, DatasetError, InvalidModelError
from recycling_core.files import sha256_file
from recycling_core.metrics import CostMeter, hardware_info, library_versions, weight_distance
from recycling_core.models import inspect_model_dir, load_tokenizer
from recycling_core.reports import Fingerprint, Metrics, Report
from recycling_core.tasking import autocast_context
from recycling_core.training import Progress, RunHooks, learning_rate_factor, resolve_device

UPGRADE_REPORT_NAME = "upgrade_report.json"
IGNORE_INDEX = -100


@dataclass(frozen=True)
class UpgradeConfig:
    """Hyperparameters of a simulated continual pre-training run."""

    steps: int = 500
    batch_size: int = 32
    learning_rate: float = 5e-5
    max_length: int = 128
    mask_probability: float = 0.15
    head_warmup_steps: int | None = None
    warmup_ratio: float = 0.06
    held_out_fraction: float = 0.05
    max_held_out_blocks: int = 256
    seed: int = 0
    device: str = "auto"

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "max_length"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1", field=name)
        if not 0.0 < self.mask_probability < 1.0:
            raise ConfigError("mask_probability must be in (0, 1)", field="mask_probability")
        if not 0.0 < self.held_out_fraction < 0.5:
            raise ConfigError("held_out_fraction must be in (0, 0.5)", field="held_out_fraction")


@dataclass(frozen=True)
class UpgradeRequest:
    """Make an upgraded version of ``base_dir`` by continual pre-training on ``corpus``."""

    base_dir: Path
    corpus: Path
    out_dir: Path
    config: UpgradeConfig = UpgradeConfig()
    eval_corpora: tuple[Path, ...] = field(default_factory=tuple)


def read_corpus_lines(path: Path) -> list[str]:
    """Non-empty lines of a UTF-8 text corpus (plain or gzip-compressed ``.gz``)."""
    try:
        if Path(path).suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                text = handle.read()
        else:
            text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, EOFError) as error:
        raise DatasetError(f"cannot read corpus {path}: {error}", field="corpus") from error
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise DatasetError(f"corpus {path} is empty", field="corpus")
    return lines


def pack_blocks(lines: list[str], tokenizer: PreTrainedTokenizerBase, block_length: int, encoder: bool) -> list[list[int]]:
    """Tokenise lines, concatenate them and cut fixed-length blocks (with CLS/SEP for encoders)."""
    body = block_length - (2 if encoder else 1)
    stream: list[int] = []
    separator = tokenizer.sep_token_id if encoder else tokenizer.eos_token_id
    for line in lines:
        stream.extend(tokenizer(line, add_special_tokens=False)["input_ids"])
        if separator is not None:
            stream.append(separator)
    blocks: list[list[int]] = []
    for start in range(0, max(len(stream) - body + 1, 1), body):
        chunk = stream[start : start + body]
        if len(chunk) < 8:
            continue
        if encoder:
            blocks.append([tokenizer.cls_token_id, *chunk, tokenizer.sep_token_id])
        else:
            first = tokenizer.bos_token_id
            blocks.append(([first] if first is not None else []) + chunk)
    if not blocks:
        raise DatasetError("the corpus is too short to make a single training block", field="corpus")
    return blocks


class _LanguageModelingBatches:
    """Blocks → padded tensors with MLM masking or next-token labels, seeded."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, encoder: bool, mask_probability: float) -> None:
        self.tokenizer = tokenizer
        self.encoder = encoder
        self.mask_probability = mask_probability
        if encoder and tokenizer.mask_token_id is None:
            raise InvalidModelError("the tokenizer has no mask token; masked-LM needs one", field="tokenizer")
        self.special = torch.tensor(sorted(set(tokenizer.all_special_ids)))

    def make(self, blocks: list[list[int]], generator: torch.Generator, device: torch.device):
        width = max(len(b) for b in blocks)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.full((len(blocks), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, block in enumerate(blocks):
            ids[row, : len(block)] = torch.tensor(block)
            mask[row, : len(block)] = 1
        labels = ids.clone()
        labels[mask == 0] = IGNORE_INDEX
        if self.encoder:
            candidates = (mask == 1) & ~torch.isin(ids, self.special)
            chosen = (torch.rand(ids.shape, generator=generator) < self.mask_probability) & candidates
            labels[~chosen] = IGNORE_INDEX
            roll = torch.rand(ids.shape, generator=generator)
            ids[chosen & (roll < 0.8)] = self.tokenizer.mask_token_id
            random_tokens = torch.randint(len(self.tokenizer), ids.shape, generator=generator)
            swap = chosen & (roll >= 0.8) & (roll < 0.9)
            ids[swap] = random_tokens[swap]
        return ids.to(device), mask.to(device), labels.to(device)


@torch.no_grad()
def held_out_loss(model, batches: _LanguageModelingBatches, blocks: list[list[int]], device: torch.device, batch_size: int) -> float:
    """Mean LM loss per predicted token on held-out blocks, with fixed masking (seed 1234)."""
    model.eval()
    generator = torch.Generator().manual_seed(1234)
    total, count = 0.0, 0
    for start in range(0, len(blocks), batch_size):
        ids, mask, labels = batches.make(blocks[start : start + batch_size], generator, device)
        with autocast_context(device):
            logits = model(input_ids=ids, attention_mask=mask).logits.float()
        if not batches.encoder:
            logits, labels = logits[:, :-1], labels[:, 1:]
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
        )
        total += float(loss)
        count += int((labels != IGNORE_INDEX).sum())
    return total / max(count, 1)


def carry_over_unused_weights(base_dir: Path, out_dir: Path, unused: list[str], prefix: str) -> None:
    """Copy base tensors the LM class does not use (e.g. BERT's pooler) into the upgraded model.

    Without them, every later load as a sequence classifier would draw a new random pooler, and
    an adapter would no longer give the same logits on the same upgraded model.
    """
    if not unused:
        return
    base_tensors: dict[str, torch.Tensor] = {}
    for weight_file in sorted(Path(base_dir).glob("*.safetensors")):
        base_tensors.update(load_file(str(weight_file)))
    output_file = out_dir / "model.safetensors"
    if not output_file.is_file():
        return  # sharded output: models large enough to shard carry no unused encoder parts
    saved = load_file(str(output_file))
    checkpoint_is_bare = not any(name.startswith(prefix + ".") for name in base_tensors)
    for key in unused:
        if not key.startswith(prefix + ".") and not checkpoint_is_bare:
            continue  # a head of another objective (e.g. next-sentence prediction): not ours to keep
        bare = key.removeprefix(prefix + ".")
        source = base_tensors.get(key, base_tensors.get(bare))
        if source is not None:
            saved[f"{prefix}.{bare}"] = source
    save_file(saved, str(output_file), metadata={"format": "pt"})


def simulate_upgrade(request: UpgradeRequest, hooks: RunHooks | None = None) -> Report:
    """Continually pre-train ``base_dir`` on ``corpus`` and write the upgraded model to ``out_dir``."""
    hooks = hooks or RunHooks()
    config = request.config
    device = resolve_device(config.device)
    meter = CostMeter(device)
    meter.start()
    info = inspect_model_dir(request.base_dir)
    tokenizer = load_tokenizer(info.path)
    encoder = info.kind == "encoder"
    model_class = AutoModelForMaskedLM if encoder else AutoModelForCausalLM
    torch.manual_seed(config.seed)
    model, loading = model_class.from_pretrained(
        info.path, output_loading_info=True, trust_remote_code=False, local_files_only=True, use_safetensors=True
    )
    model.to(device)
    initialized = set(loading["missing_keys"])
    head_is_new = any(not key.endswith("position_ids") for key in initialized)
    original = {k: v.detach().to("cpu", copy=True) for k, v in model.named_parameters() if k not in initialized}

    lines = read_corpus_lines(request.corpus)
    blocks = pack_blocks(lines, tokenizer, config.max_length, encoder)
    generator = torch.Generator().manual_seed(config.seed)
    permutation = torch.randperm(len(blocks), generator=generator).tolist()
    held_count = min(config.max_held_out_blocks, max(1, int(len(blocks) * config.held_out_fraction)))
    if len(blocks) - held_count < 1:
        raise DatasetError("the corpus is too short to hold out evaluation blocks", field="corpus")
    held_out = [blocks[i] for i in permutation[:held_count]]
    training = [blocks[i] for i in permutation[held_count:]]
    extra_held_out = {
        str(path): pack_blocks(read_corpus_lines(path), tokenizer, config.max_length, encoder)[: config.max_held_out_blocks]
        for path in request.eval_corpora
    }
    batches = _LanguageModelingBatches(tokenizer, encoder, config.mask_probability)

    def run_steps(count: int, phase: str, parameters: list[torch.nn.Parameter], learning_rate: float, offset: int) -> list[float]:
        optimizer = torch.optim.AdamW(parameters, lr=learning_rate, fused=device.type == "cuda")
        losses: list[float] = []
        started = time.perf_counter()
        model.train()
        for step in range(count):
            hooks.check_cancel()
            for group in optimizer.param_groups:
                group["lr"] = learning_rate * learning_rate_factor(step, count, config.warmup_ratio, "linear")
            chosen = torch.randint(len(training), (min(config.batch_size, len(training)),), generator=generator)
            ids, mask, labels = batches.make([training[i] for i in chosen.tolist()], generator, device)
            with autocast_context(device):
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(parameters, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            meter.add_tokens(int(mask.sum()))
            losses.append(float(loss.detach()))
            done = step + 1
            if done % 10 == 0 or done == count:
                eta = (time.perf_counter() - started) / done * (count - done)
                hooks.report(Progress(phase, offset + done, offset + count, {"lm_loss": losses[-1]}, eta))
        return losses

    warmup_losses: list[float] = []
    head_steps = 0
    if head_is_new:
        head_steps = config.head_warmup_steps if config.head_warmup_steps is not None else max(20, config.steps // 5)
        for name, parameter in model.named_parameters():
            parameter.requires_grad_(name in initialized)
        head_parameters = [p for p in model.parameters() if p.requires_grad]
        if head_parameters:
            warmup_losses = run_steps(head_steps, "head-warmup", head_parameters, max(config.learning_rate * 20, 1e-3), 0)
        for parameter in model.parameters():
            parameter.requires_grad_(True)

    before = {"corpus": held_out_loss(model, batches, held_out, device, config.batch_size)}
    before.update({path: held_out_loss(model, batches, b, device, config.batch_size) for path, b in extra_held_out.items()})
    train_losses = run_steps(config.steps, "continual-pretraining", list(model.parameters()), config.learning_rate, head_steps)
    after = {"corpus": held_out_loss(model, batches, held_out, device, config.batch_size)}
    after.update({path: held_out_loss(model, batches, b, device, config.batch_size) for path, b in extra_held_out.items()})

    upgraded = {k: v.detach().cpu() for k, v in model.named_parameters() if k in original}
    distance = weight_distance(original, upgraded)
    out_dir = Path(request.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    carry_over_unused_weights(info.path, out_dir, list(loading["unexpected_keys"]), model.base_model_prefix)
    tokenizer.save_pretrained(str(out_dir))
    extra = {"held_out_loss_before": before["corpus"], "held_out_loss_after": after["corpus"]}
    for index, path in enumerate(extra_held_out, start=1):
        extra[f"eval_corpus_{index}_loss_before"] = before[path]
        extra[f"eval_corpus_{index}_loss_after"] = after[path]
    if train_losses:
        extra["final_train_loss"] = sum(train_losses[-10:]) / len(train_losses[-10:])
    if warmup_losses:
        extra["head_warmup_final_loss"] = warmup_losses[-1]
    report = Report(
        kind="upgrade",
        method="masked_lm" if encoder else "next_token",
        hyperparameters={**asdict(config), "head_warmup_steps": head_steps, "eval_corpora": [str(p) for p in request.eval_corpora]},
        seed=config.seed,
        fingerprints=[
            Fingerprint(role="base", sha256=info.fingerprint, path=str(info.path), files=info.manifest),
            Fingerprint(role="corpus", sha256=sha256_file(request.corpus), path=str(request.corpus)),
            *[Fingerprint(role=f"eval_corpus_{i}", sha256=sha256_file(p), path=str(p)) for i, p in enumerate(request.eval_corpora, start=1)],
        ],
        library_versions=library_versions(),
        hardware=hardware_info(device),
        metrics=Metrics(weight_distance=distance, extra={k: v for k, v in extra.items() if math.isfinite(v)}),
        cost=meter.stop(),
        output={
            "model_dir": str(out_dir),
            "head_initialised": head_is_new,
            "training_blocks": len(training),
            "held_out_blocks": len(held_out),
            "eval_corpora": {str(i): p for i, p in enumerate(extra_held_out, start=1)},
        },
    )
    report.write(out_dir / UPGRADE_REPORT_NAME)
    return report
