"""Adapter directories: PEFT adapters and full fine-tuning deltas, read and written.

Layouts (fixed file names, see the constants):

* PEFT adapter: ``adapter_config.json`` + ``adapter_model.safetensors`` — loadable by plain
  ``peft.PeftModel.from_pretrained`` — plus ``label2id.json`` beside them.
* Full fine-tuning delta: ``adapter_config.json`` with ``peft_type = "FULL_DELTA"``,
  ``delta.safetensors`` (tuned − base for every base parameter that changed) and
  ``head.safetensors`` (absolute values of parameters the base checkpoint lacks, e.g. a
  classifier), plus ``label2id.json``.
* A full fine-tuned Hugging Face checkpoint (``config.json`` + ``*.safetensors``) is accepted as
  input and turned into a delta against its base with :func:`full_checkpoint_to_delta`.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from recycling_core.errors import InvalidAdapterError
from recycling_core.files import file_manifest, manifest_digest, refuse_pickle_files

ADAPTER_CONFIG_NAME = "adapter_config.json"
ADAPTER_WEIGHTS_NAME = "adapter_model.safetensors"
LABELS_NAME = "label2id.json"
DELTA_WEIGHTS_NAME = "delta.safetensors"
HEAD_WEIGHTS_NAME = "head.safetensors"
PROVENANCE_NAME = "recycling.json"
RUN_REPORT_NAME = "report.json"
"""The report of the run that wrote an adapter: it records the adapter's fingerprint, so it is
not part of the adapter (and not of its manifest)."""
FULL_DELTA = "FULL_DELTA"
FULL_CHECKPOINT = "FULL_CHECKPOINT"
SUPPORTED_PEFT_TYPES = {"LORA", "IA3", "PROMPT_TUNING", FULL_DELTA, FULL_CHECKPOINT}
TRAINABLE_PEFT_NAMES = {"lora": "LORA", "ia3": "IA3", "prompt": "PROMPT_TUNING", "full": FULL_DELTA}


@dataclass(frozen=True)
class AdapterInfo:
    """What an adapter directory holds, without a base model."""

    path: Path
    peft_type: str
    config: dict[str, Any]
    label2id: dict[str, int] | None
    tensor_shapes: dict[str, tuple[int, ...]]
    manifest: dict[str, str]
    fingerprint: str

    @property
    def target_modules(self) -> list[str]:
        """Module names the adapter's tensors touch (PEFT naming without the adapter suffix)."""
        return sorted({adapter_module_name(key) for key in self.tensor_shapes})

    @property
    def labels(self) -> tuple[str, ...] | None:
        if self.label2id is None:
            return None
        return tuple(sorted(self.label2id, key=self.label2id.__getitem__))

    @property
    def is_full(self) -> bool:
        return self.peft_type in (FULL_DELTA, FULL_CHECKPOINT)


def adapter_module_name(key: str) -> str:
    """``base_model.model.bert.encoder.layer.0.attention.self.query.lora_A.weight`` → module path."""
    name = key.removeprefix("base_model.model.")
    for marker in (".lora_A.", ".lora_B.", ".lora_embedding_A", ".lora_embedding_B", ".ia3_l"):
        if marker in name:
            return name.split(marker)[0]
    if name.startswith("prompt_embeddings") or name == "prompt_embeddings":
        return "prompt_encoder"
    return name.rsplit(".", 1)[0] if "." in name else name


def adapter_manifest(directory: str | Path) -> dict[str, str]:
    """sha256 manifest of an adapter directory's files, without the run report beside them."""
    return {k: v for k, v in file_manifest(directory).items() if k != RUN_REPORT_NAME}


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InvalidAdapterError(f"{what} {path.name} is not valid JSON: {error}", field=path.name) from error
    if not isinstance(value, dict):
        raise InvalidAdapterError(f"{what} {path.name} must hold a JSON object", field=path.name)
    return value


def read_label2id(directory: Path) -> dict[str, int] | None:
    """Read ``label2id.json`` if present; ids must be 0..n-1."""
    path = directory / LABELS_NAME
    if not path.is_file():
        return None
    raw = _read_json(path, "label map")
    try:
        label2id = {str(label): int(index) for label, index in raw.items()}
    except (TypeError, ValueError) as error:
        raise InvalidAdapterError(f"{LABELS_NAME} must map labels to integers", field=LABELS_NAME) from error
    if sorted(label2id.values()) != list(range(len(label2id))):
        raise InvalidAdapterError(f"{LABELS_NAME} ids must be 0..{len(label2id) - 1}", field=LABELS_NAME)
    return label2id


def _tensor_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    try:
        with safe_open(str(path), framework="pt") as handle:
            return {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}
    except Exception as error:  # safetensors raises its own SafetensorError and OSError
        raise InvalidAdapterError(f"{path.name} is not a readable safetensors file: {error}", field=path.name) from error


def inspect_adapter_dir(path: str | Path) -> AdapterInfo:
    """Validate an adapter directory and describe it.

    Raises UnsafeFileError for pickle files and InvalidAdapterError for anything malformed: no
    config, unknown PEFT type, missing or unreadable weights, a bad label map.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise InvalidAdapterError(f"{directory} is not a directory")
    refuse_pickle_files(directory)
    config_path = directory / ADAPTER_CONFIG_NAME
    shapes: dict[str, tuple[int, ...]] = {}
    if config_path.is_file():
        config = _read_json(config_path, "adapter config")
        peft_type = str(config.get("peft_type", "")).upper()
        if peft_type not in SUPPORTED_PEFT_TYPES - {FULL_CHECKPOINT}:
            raise InvalidAdapterError(
                f"unsupported peft_type {config.get('peft_type')!r}; supported: LORA, IA3, "
                "PROMPT_TUNING, FULL_DELTA",
                field="peft_type",
            )
        if peft_type == FULL_DELTA:
            weight_files = [directory / DELTA_WEIGHTS_NAME, directory / HEAD_WEIGHTS_NAME]
            if not weight_files[0].is_file():
                raise InvalidAdapterError(f"{directory} has no {DELTA_WEIGHTS_NAME}", field=DELTA_WEIGHTS_NAME)
        else:
            weight_files = [directory / ADAPTER_WEIGHTS_NAME]
            if not weight_files[0].is_file():
                raise InvalidAdapterError(
                    f"{directory} has no {ADAPTER_WEIGHTS_NAME} (only safetensors adapters are accepted)",
                    field=ADAPTER_WEIGHTS_NAME,
                )
        for weight_file in weight_files:
            if weight_file.is_file():
                shapes.update(_tensor_shapes(weight_file))
    elif (directory / "config.json").is_file():
        config = _read_json(directory / "config.json", "model config")
        peft_type = FULL_CHECKPOINT
        weight_files = sorted(directory.glob("*.safetensors"))
        if not weight_files:
            raise InvalidAdapterError(f"{directory} holds no *.safetensors weights", field="model.safetensors")
        for weight_file in weight_files:
            shapes.update(_tensor_shapes(weight_file))
    else:
        raise InvalidAdapterError(
            f"{directory} has neither {ADAPTER_CONFIG_NAME} nor config.json", field=ADAPTER_CONFIG_NAME
        )
    if not shapes and peft_type != FULL_DELTA:  # an empty delta is the identity: a valid adapter
        raise InvalidAdapterError(f"{directory} holds no tensors", field="weights")
    label2id = read_label2id(directory)
    if label2id is None and peft_type == FULL_CHECKPOINT and isinstance(config.get("label2id"), dict):
        label2id = {str(k): int(v) for k, v in config["label2id"].items()}
    manifest = adapter_manifest(directory)
    return AdapterInfo(
        path=directory,
        peft_type=peft_type,
        config=config,
        label2id=label2id,
        tensor_shapes=shapes,
        manifest=manifest,
        fingerprint=manifest_digest(manifest),
    )


def load_adapter_weights(info: AdapterInfo) -> dict[str, torch.Tensor]:
    """The adapter's PEFT tensors (PEFT and FULL_DELTA's delta file)."""
    if info.peft_type == FULL_DELTA:
        return load_file(str(info.path / DELTA_WEIGHTS_NAME))
    if info.peft_type == FULL_CHECKPOINT:
        tensors: dict[str, torch.Tensor] = {}
        for weight_file in sorted(info.path.glob("*.safetensors")):
            tensors.update(load_file(str(weight_file)))
        return tensors
    return load_file(str(info.path / ADAPTER_WEIGHTS_NAME))


def load_full_delta(info: AdapterInfo) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(delta of base parameters, absolute head parameters) of a FULL_DELTA adapter."""
    delta = load_file(str(info.path / DELTA_WEIGHTS_NAME))
    head_path = info.path / HEAD_WEIGHTS_NAME
    head = load_file(str(head_path)) if head_path.is_file() else {}
    return delta, head


def write_label2id(directory: Path, label2id: dict[str, int] | None) -> None:
    if label2id is not None:
        (directory / LABELS_NAME).write_text(json.dumps(label2id, indent=2, sort_keys=True))


def save_full_delta(
    directory: str | Path,
    delta: dict[str, torch.Tensor],
    head: dict[str, torch.Tensor],
    *,
    base_fingerprint: str,
    base_path: str,
    task_kind: str,
    label2id: dict[str, int] | None,
) -> Path:
    """Write a FULL_DELTA adapter directory."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in delta.items()}, str(target / DELTA_WEIGHTS_NAME))
    if head:
        save_file({k: v.detach().contiguous().cpu() for k, v in head.items()}, str(target / HEAD_WEIGHTS_NAME))
    config = {
        "peft_type": FULL_DELTA,
        "format_version": 1,
        "base_model_name_or_path": base_path,
        "base_fingerprint": base_fingerprint,
        "task_kind": task_kind,
    }
    (target / ADAPTER_CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=True))
    write_label2id(target, label2id)
    return target


def write_provenance(directory: Path, provenance: dict[str, Any]) -> None:
    """Write ``recycling.json``: the base signature and lineage of an adapter we produced."""
    (directory / PROVENANCE_NAME).write_text(json.dumps(provenance, indent=2, sort_keys=True))


def copy_adapter(info: AdapterInfo, directory: str | Path) -> Path:
    """Copy an adapter directory's files (the ``direct`` method's output)."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    for relative in info.manifest:
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(info.path / relative, destination)
    return target
