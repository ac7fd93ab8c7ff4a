"""Model and adapter I/O: PEFT layout readable by plain peft, full deltas, manifests, signatures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from core_helpers import (
    TRAIN_CONFIGS,
    TrainedAdapter,
    adapter_tensors,
    attach,
    clone,
    dev_batch,
    load_base,
    plain_peft,
    raw_logits,
    train,
)
from safetensors.torch import load_file
from transformers import AutoTokenizer

from recycling_core.adaptation import (
    AdapterOptions,
    attach_adapter,
    full_checkpoint_to_delta,
    new_adapter,
)
from recycling_core.adapters import (
    ADAPTER_CONFIG_NAME,
    ADAPTER_WEIGHTS_NAME,
    DELTA_WEIGHTS_NAME,
    FULL_CHECKPOINT,
    FULL_DELTA,
    HEAD_WEIGHTS_NAME,
    LABELS_NAME,
    PROVENANCE_NAME,
    inspect_adapter_dir,
)
from recycling_core.data import load_task
from recycling_core.files import sha256_file
from recycling_core.models import (
    SIGNATURE_CONFIG_FIELDS,
    inspect_model_dir,
    tokenizer_vocabulary_hash,
)
from recycling_core.tasking import TaskFormat
from recycling_core.tiny import BUILTIN_VOCABULARY, make_tiny_model
from recycling_core.training import Progress, RunHooks, Trainer, TrainingConfig

ATOL = 1e-5


# ----------------------------------------------------------------------------- PEFT layout
def test_lora_adapter_loads_in_plain_peft_with_the_same_logits(lora: TrainedAdapter) -> None:
    task = load_task(lora.task)
    num_labels = len(task.labels) if lora.kind == "encoder" else None
    _, batch = dev_batch(lora.old, lora.task)
    ours = raw_logits(attach(lora.old, lora.adapter, lora.task).model, batch)
    theirs = raw_logits(plain_peft(lora.old, lora.adapter, lora.kind, num_labels), batch)
    assert ours.shape == theirs.shape
    if lora.kind == "encoder":
        assert ours.shape == (batch.size, 3)
    assert torch.allclose(ours, theirs, atol=ATOL)
    # the adapter is not a no-op: the trained weights change the output of the base
    plain_base = raw_logits(load_base(lora.old, lora.task).model, batch)
    assert not torch.allclose(ours, plain_base, atol=1e-4)


def test_peft_layout_files_and_label_map(lora: TrainedAdapter) -> None:
    directory = lora.adapter
    for name in (ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME, LABELS_NAME, PROVENANCE_NAME):
        assert (directory / name).is_file(), name
    assert not list(directory.glob("*.bin"))
    task = load_task(lora.task)
    assert json.loads((directory / LABELS_NAME).read_text()) == task.label2id
    info = inspect_adapter_dir(directory)
    assert info.peft_type == "LORA"
    assert info.label2id == task.label2id
    assert info.labels == task.labels
    config = json.loads((directory / ADAPTER_CONFIG_NAME).read_text())
    assert config["task_type"] == ("SEQ_CLS" if lora.kind == "encoder" else "CAUSAL_LM")
    assert Path(config["base_model_name_or_path"]) == lora.old
    if lora.kind == "encoder":
        # the trained classifier travels with the adapter
        assert any(key.endswith("classifier.weight") for key in adapter_tensors(directory))
    provenance = json.loads((directory / PROVENANCE_NAME).read_text())
    assert provenance["base_signature"] == inspect_model_dir(lora.old).signature


def test_generation_adapter_has_no_label_map(causal_gen_lora: TrainedAdapter) -> None:
    info = inspect_adapter_dir(causal_gen_lora.adapter)
    assert info.label2id is None
    assert not (causal_gen_lora.adapter / LABELS_NAME).exists()
    _, batch = dev_batch(causal_gen_lora.old, causal_gen_lora.task)
    ours = raw_logits(
        attach(causal_gen_lora.old, causal_gen_lora.adapter, causal_gen_lora.task).model, batch
    )
    theirs = raw_logits(
        plain_peft(causal_gen_lora.old, causal_gen_lora.adapter, "causal", None), batch
    )
    assert torch.allclose(ours, theirs, atol=ATOL)


# ----------------------------------------------------------------------------- full fine-tuning
def _train_full_in_memory(model_dir: Path, task_dir: Path):
    base = load_base(model_dir, task_dir)
    task = load_task(task_dir)
    label2id = dict(task.label2id) if task.kind == "classification" else None
    adapted = new_adapter(base, AdapterOptions(peft="full"), label2id)
    fmt = TaskFormat(task, base.tokenizer, base.info.kind)
    config = TrainingConfig(
        steps=3, eval_every=3, batch_size=8, learning_rate=1e-3, warmup_ratio=0.0
    )
    Trainer(adapted, fmt, fmt.encode(task.train[:24]), fmt.encode(task.dev[:8]), config).run()
    return adapted


@pytest.mark.parametrize("kind", ["encoder", "causal"])
def test_full_delta_round_trip(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    model_dir = request.getfixturevalue(f"{kind}_v0")
    task_dir = request.getfixturevalue("cls_task")
    adapted = _train_full_in_memory(model_dir, task_dir)
    _, batch = dev_batch(model_dir, task_dir)
    expected = raw_logits(adapted.model, batch)
    untouched = raw_logits(load_base(model_dir, task_dir).model, batch)
    assert not torch.allclose(expected, untouched, atol=1e-4)

    out = adapted.save(tmp_path / "delta")
    assert (out / DELTA_WEIGHTS_NAME).is_file()
    assert not (out / ADAPTER_WEIGHTS_NAME).exists()
    info = inspect_adapter_dir(out)
    assert info.peft_type == FULL_DELTA
    assert info.label2id == load_task(task_dir).label2id
    if kind == "encoder":
        # the fresh classifier is stored absolute, not as a delta against a random init
        head = load_file(str(out / HEAD_WEIGHTS_NAME))
        assert set(head) == {"classifier.weight", "classifier.bias"}
        assert "classifier.weight" not in load_file(str(out / DELTA_WEIGHTS_NAME))

    # attach to a fresh load of the same base (another seed: the head must come from the file)
    again = attach_adapter(load_base(model_dir, task_dir, seed=7), info, trainable=False)
    assert torch.allclose(raw_logits(again.model, batch), expected, atol=ATOL)


@pytest.mark.parametrize("kind", ["encoder", "causal"])
def test_full_checkpoint_becomes_a_delta_with_the_same_logits(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    model_dir = request.getfixturevalue(f"{kind}_v0")
    task_dir = request.getfixturevalue("cls_task")
    adapted = _train_full_in_memory(model_dir, task_dir)
    _, batch = dev_batch(model_dir, task_dir)
    expected = raw_logits(adapted.model, batch)

    checkpoint = tmp_path / "checkpoint"
    adapted.model.save_pretrained(str(checkpoint), safe_serialization=True)
    adapted.base.tokenizer.save_pretrained(str(checkpoint))
    info = inspect_adapter_dir(checkpoint)
    assert info.peft_type == FULL_CHECKPOINT
    if kind == "encoder":
        assert info.label2id == load_task(task_dir).label2id

    delta_info = full_checkpoint_to_delta(
        info, load_base(model_dir, task_dir, seed=3), tmp_path / "delta"
    )
    assert delta_info.peft_type == FULL_DELTA
    again = attach_adapter(load_base(model_dir, task_dir, seed=5), delta_info, trainable=False)
    assert torch.allclose(raw_logits(again.model, batch), expected, atol=ATOL)


# ----------------------------------------------------------------------------- IA3 and prompts
@pytest.mark.parametrize("peft", ["ia3", "prompt"])
@pytest.mark.parametrize("kind", ["encoder", "causal"])
def test_ia3_and_prompt_adapters_train_save_and_reload(
    kind: str, peft: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    model_dir = request.getfixturevalue(f"{kind}_v0")
    task_dir = request.getfixturevalue("cls_task")
    task = load_task(task_dir)
    base = load_base(model_dir, task_dir)
    adapted = new_adapter(base, AdapterOptions(peft=peft), dict(task.label2id))
    initial = adapted.trainable_state()
    last: dict[str, dict[str, torch.Tensor]] = {}

    def on_progress(progress: Progress) -> None:
        if progress.step == progress.total:
            last["state"] = adapted.trainable_state()

    fmt = TaskFormat(task, base.tokenizer, base.info.kind)
    config = TrainingConfig(steps=4, eval_every=4, batch_size=16, learning_rate=3e-2)
    Trainer(
        adapted,
        fmt,
        fmt.encode(task.train),
        fmt.encode(task.dev),
        config,
        RunHooks(progress=on_progress),
    ).run()
    # the adapter's own tensors moved (whether or not dev improved enough to keep them)
    own = [k for k in initial if ("ia3_l" in k if peft == "ia3" else k == "prompt_embeddings")]
    assert own
    assert any(not torch.equal(initial[k], last["state"][k]) for k in own)

    out = adapted.save(tmp_path / "adapter")
    info = inspect_adapter_dir(out)
    assert info.peft_type == {"ia3": "IA3", "prompt": "PROMPT_TUNING"}[peft]
    assert info.label2id == task.label2id
    if peft == "prompt":
        assert adapter_tensors(out)["prompt_embeddings"].shape == (
            8,
            inspect_model_dir(model_dir).signature["hidden_size"],
        )

    _, batch = dev_batch(model_dir, task_dir)
    expected = raw_logits(adapted.model, batch)
    ours = raw_logits(attach(model_dir, out, task_dir, seed=9).model, batch)
    num_labels = len(task.labels) if kind == "encoder" else None
    theirs = raw_logits(plain_peft(model_dir, out, kind, num_labels), batch)
    assert torch.allclose(ours, expected, atol=ATOL)
    assert torch.allclose(theirs, expected, atol=ATOL)

    # the library's train entry point writes the same layout
    report = train(model_dir, task_dir, tmp_path / "via_pipeline", peft=peft, config=config)
    assert report.peft_type == info.peft_type
    assert inspect_adapter_dir(tmp_path / "via_pipeline").peft_type == info.peft_type


# ----------------------------------------------------------------------------- manifests
def test_adapter_manifest_and_fingerprint_are_stable(
    encoder_lora: TrainedAdapter, tmp_path: Path
) -> None:
    first = inspect_adapter_dir(encoder_lora.adapter)
    second = inspect_adapter_dir(encoder_lora.adapter)
    assert first.manifest == second.manifest
    assert first.fingerprint == second.fingerprint
    for relative, digest in first.manifest.items():
        assert digest == sha256_file(encoder_lora.adapter / relative)
    assert ADAPTER_WEIGHTS_NAME in first.manifest and LABELS_NAME in first.manifest

    # the fingerprint is the content, not the location
    copy = clone(encoder_lora.adapter, tmp_path / "copy")
    assert inspect_adapter_dir(copy).fingerprint == first.fingerprint
    # ... and the one the training report recorded when it wrote the adapter
    assert encoder_lora.report.output["adapter_fingerprint"] == first.fingerprint

    labels = json.loads((copy / LABELS_NAME).read_text())
    (copy / LABELS_NAME).write_text(json.dumps(labels, indent=4))
    assert inspect_adapter_dir(copy).fingerprint != first.fingerprint


def test_model_manifest_and_fingerprint_are_stable(encoder_v0: Path, tmp_path: Path) -> None:
    first = inspect_model_dir(encoder_v0)
    assert first.fingerprint == inspect_model_dir(encoder_v0).fingerprint
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(first.manifest)
    assert first.manifest["model.safetensors"] == sha256_file(encoder_v0 / "model.safetensors")
    copy = clone(encoder_v0, tmp_path / "copy")
    assert inspect_model_dir(copy).fingerprint == first.fingerprint
    # the same seed gives byte-identical weights, another seed another fingerprint
    assert (
        inspect_model_dir(make_tiny_model(tmp_path / "same", seed=0)).fingerprint
        == first.fingerprint
    )
    assert (
        inspect_model_dir(make_tiny_model(tmp_path / "other", seed=1)).fingerprint
        != first.fingerprint
    )


@pytest.mark.parametrize("kind", ["encoder", "causal"])
def test_architecture_signature(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    model_dir = request.getfixturevalue(f"{kind}_v0")
    info = inspect_model_dir(model_dir)
    signature = info.signature
    assert info.kind == kind
    assert info.model_class == ("BertForMaskedLM" if kind == "encoder" else "LlamaForCausalLM")
    assert signature["model_type"] == ("bert" if kind == "encoder" else "llama")
    assert signature["kind"] == kind
    expected = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
    }
    for name, value in expected.items():
        assert signature[name] == value
    if kind == "causal":
        assert signature["num_key_value_heads"] == 4
    assert set(signature) >= {
        name for name in SIGNATURE_CONFIG_FIELDS if name != "num_key_value_heads"
    }
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert signature["vocab_size"] == len(tokenizer)
    assert signature["tokenizer_vocab_sha256"] == tokenizer_vocabulary_hash(tokenizer)

    # another vocabulary of the same size: same dimensions, another tokenizer hash
    words = list(BUILTIN_VOCABULARY)
    words[words.index("football")] = "cricket"
    other = inspect_model_dir(
        make_tiny_model(tmp_path / "other_vocab", kind=kind, vocabulary=words)
    )
    assert other.signature["vocab_size"] == signature["vocab_size"]
    assert other.signature["tokenizer_vocab_sha256"] != signature["tokenizer_vocab_sha256"]
    # the hash follows the token→id map, not the files: a copy with re-serialised files keeps it
    resaved = tmp_path / "resaved"
    shutil.copytree(model_dir, resaved)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(resaved)
    assert (
        inspect_model_dir(resaved).signature["tokenizer_vocab_sha256"]
        == signature["tokenizer_vocab_sha256"]
    )


def test_train_report_names_its_inputs(encoder_lora: TrainedAdapter) -> None:
    report = encoder_lora.report
    assert report.kind == "train"
    roles = {f.role: f.sha256 for f in report.fingerprints}
    assert roles["base"] == inspect_model_dir(encoder_lora.old).fingerprint
    task = load_task(encoder_lora.task)
    assert {roles[f"task:{s}"] for s in ("train", "dev", "test")} == set(task.split_sha256.values())
    assert report.hyperparameters["steps"] == TRAIN_CONFIGS["encoder"].steps
    assert report.curve is not None and report.curve.points[0].step == 0


def test_file_hash_memo_never_hides_a_change(tmp_path):
    import os
    import time

    from recycling_core.files import sha256_file

    path = tmp_path / "weights.bin"
    path.write_bytes(b"a" * 1000)
    old = time.time_ns() - 10_000_000_000
    os.utime(path, ns=(old, old))  # settled: its digest is remembered
    first = sha256_file(path)
    assert sha256_file(path) == first
    with open(path, "r+b") as handle:  # same size, mtime put back: ctime still moves
        handle.write(b"b")
    os.utime(path, ns=(old, old))
    assert sha256_file(path) != first
