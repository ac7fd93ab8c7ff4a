"""Structural compatibility of an adapter with a base model (DESIGN §5).

The check runs before any job touches weights. It builds the base's module tree on the meta
device (no weights are read), then compares: model kind, the adapter's recorded base signature
(family, dimensions, tokenizer vocabulary), every targeted module's presence and shape, and the
label set. Any mismatch raises :class:`IncompatibleAdapterError` whose ``field`` names the module
or field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from recycling_core.adapters import (
    ADAPTER_CONFIG_NAME,
    FULL_CHECKPOINT,
    FULL_DELTA,
    PROVENANCE_NAME,
    AdapterInfo,
    adapter_module_name,
    inspect_adapter_dir,
)
from recycling_core.errors import IncompatibleAdapterError
from recycling_core.models import ModelInfo, inspect_model_dir, load_config

SIGNATURE_FIELDS_THAT_MUST_MATCH = (
    "model_type",
    "kind",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "tokenizer_vocab_sha256",
)


@dataclass
class CompatibilityCheck:
    """The outcome of a passed check: what was compared."""

    adapter: str
    base: str
    peft_type: str
    modules_checked: int
    checks: list[str] = field(default_factory=list)


def read_provenance(directory: Path) -> dict[str, Any]:
    """The ``recycling.json`` we write beside adapters (absent for adapters made elsewhere)."""
    path = directory / PROVENANCE_NAME
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def _meta_model(base: ModelInfo, num_labels: int) -> torch.nn.Module:
    config = load_config(base.path)
    with torch.device("meta"):
        if base.kind == "encoder":
            config.num_labels = max(num_labels, 1)
            return AutoModelForSequenceClassification.from_config(config, trust_remote_code=False)
        return AutoModelForCausalLM.from_config(config, trust_remote_code=False)


def _expected_kind(adapter: AdapterInfo) -> str | None:
    task_type = str(adapter.config.get("task_type") or "").upper()
    if task_type == "SEQ_CLS":
        return "encoder"
    if task_type == "CAUSAL_LM":
        return "causal"
    return None


def _resolve_module(modules: dict[str, torch.nn.Module], name: str) -> tuple[str, torch.nn.Module] | None:
    if name in modules:
        return name, modules[name]
    for candidate, module in modules.items():
        if candidate.endswith("." + name) or name.endswith("." + candidate):
            return candidate, module
    return None


def check_compatibility(
    adapter_dir: str | Path | AdapterInfo,
    base_dir: str | Path | ModelInfo,
    *,
    labels: tuple[str, ...] | None = None,
) -> CompatibilityCheck:
    """Check that an adapter fits a base model; raise IncompatibleAdapterError naming the mismatch.

    ``labels`` (the task's label set in id order), when given, must equal the adapter's label map.
    """
    adapter = adapter_dir if isinstance(adapter_dir, AdapterInfo) else inspect_adapter_dir(adapter_dir)
    base = base_dir if isinstance(base_dir, ModelInfo) else inspect_model_dir(base_dir)
    checks: list[str] = []

    expected_kind = _expected_kind(adapter)
    if expected_kind is not None and expected_kind != base.kind:
        raise IncompatibleAdapterError(
            f"model class: the adapter was made for a {expected_kind} model "
            f"({adapter.config.get('task_type')}), the base is a {base.kind} ({base.model_class})",
            field="model_class",
        )
    checks.append("model_class")

    recorded = read_provenance(adapter.path).get("base_signature") or {}
    if adapter.peft_type == FULL_CHECKPOINT:
        recorded = {k: adapter.config.get(k) for k in SIGNATURE_FIELDS_THAT_MUST_MATCH if k in adapter.config}
    for name in SIGNATURE_FIELDS_THAT_MUST_MATCH:
        if name in recorded and name in base.signature and recorded[name] != base.signature[name]:
            what = "tokenizer vocabulary" if name == "tokenizer_vocab_sha256" else name
            raise IncompatibleAdapterError(
                f"{what}: the adapter's base had {recorded[name]!r}, this base has {base.signature[name]!r}",
                field=name,
            )
    if recorded:
        checks.append("signature")

    if labels is not None and adapter.labels is not None and tuple(labels) != adapter.labels:
        raise IncompatibleAdapterError(
            f"label set: the adapter knows {list(adapter.labels)}, the task has {list(labels)}",
            field="labels",
        )
    if labels is not None:
        checks.append("labels")

    num_labels = len(adapter.labels or labels or ()) or 2
    modules = dict(_meta_model(base, num_labels).named_modules())
    _check_config_targets(adapter, modules)
    checked = _check_tensor_shapes(adapter, modules, base)
    checks.append("modules")
    return CompatibilityCheck(
        adapter=str(adapter.path),
        base=str(base.path),
        peft_type=adapter.peft_type,
        modules_checked=checked,
        checks=checks,
    )


def _check_config_targets(adapter: AdapterInfo, modules: dict[str, torch.nn.Module]) -> None:
    """A ``target_modules`` list in adapter_config.json must match some module of the base.

    PEFT matches each entry against module names exactly or as a dotted suffix and fails to
    load when no entry matches; entries that match nothing beside others that do are ignored
    by PEFT, as here. (A string is a regular expression resolved by PEFT itself.)
    """
    targets = adapter.config.get("target_modules")
    if adapter.is_full or not isinstance(targets, list) or not targets:
        return
    names = [name for name in modules if name]
    if not any(name == t or name.endswith("." + t) for t in targets for name in names):
        raise IncompatibleAdapterError(
            f"target modules {targets} of {ADAPTER_CONFIG_NAME} match no module of the base model",
            field="target_modules",
        )


def _check_tensor_shapes(adapter: AdapterInfo, modules: dict[str, torch.nn.Module], base: ModelInfo) -> int:
    parameters: dict[str, tuple[int, ...]] = {}
    for module_name, module in modules.items():
        for parameter_name, parameter in module.named_parameters(recurse=False):
            parameters[f"{module_name}.{parameter_name}" if module_name else parameter_name] = tuple(parameter.shape)
    checked = 0
    for key, shape in sorted(adapter.tensor_shapes.items()):
        if adapter.peft_type == "PROMPT_TUNING" and key == "prompt_embeddings":
            hidden = base.signature.get("hidden_size")
            if hidden is not None and shape[-1] != hidden:
                raise IncompatibleAdapterError(
                    f"{key}: prompt embedding width {shape[-1]} != hidden size {hidden}", field="hidden_size"
                )
        elif adapter.peft_type == "PROMPT_TUNING":
            # modules_to_save of prompt learning (a classifier head) are saved as base_model.<name>
            bare = key.removeprefix("base_model.model.").removeprefix("base_model.")
            _check_peft_tensor("base_model.model." + bare, shape, modules, parameters)
        elif adapter.peft_type in (FULL_DELTA, FULL_CHECKPOINT):
            _check_full_tensor(key, shape, parameters)
        else:
            _check_peft_tensor(key, shape, modules, parameters)
        checked += 1
    return checked


def _check_full_tensor(key: str, shape: tuple[int, ...], parameters: dict[str, tuple[int, ...]]) -> None:
    match = parameters.get(key)
    if match is None:
        candidates = [name for name in parameters if name.endswith("." + key) or key.endswith("." + name)]
        match = parameters[candidates[0]] if candidates else None
    if match is None:
        raise IncompatibleAdapterError(f"module {key} is missing from the base model", field=key)
    if match != shape:
        raise IncompatibleAdapterError(f"{key}: adapter shape {shape} != base shape {match}", field=key)


def _check_peft_tensor(
    key: str,
    shape: tuple[int, ...],
    modules: dict[str, torch.nn.Module],
    parameters: dict[str, tuple[int, ...]],
) -> None:
    module_name = adapter_module_name(key)
    resolved = _resolve_module(modules, module_name)
    if resolved is None:
        raise IncompatibleAdapterError(
            f"target module {module_name} is missing from the base model", field=module_name
        )
    name, module = resolved
    in_features = getattr(module, "in_features", None)
    out_features = getattr(module, "out_features", None)
    if in_features is None and isinstance(module, torch.nn.Embedding):
        in_features, out_features = module.num_embeddings, module.embedding_dim
    if ".lora_A." in key and in_features is not None and shape[-1] != in_features:
        raise IncompatibleAdapterError(
            f"{name}: lora_A expects {shape[-1]} input features, the base module has {in_features}",
            field=name,
        )
    if ".lora_B." in key and out_features is not None and shape[0] != out_features:
        raise IncompatibleAdapterError(
            f"{name}: lora_B produces {shape[0]} features, the base module has {out_features}",
            field=name,
        )
    if ".ia3_l" in key and in_features is not None and out_features is not None:
        if shape[-1] not in (in_features, out_features) and shape[0] not in (in_features, out_features):
            raise IncompatibleAdapterError(
                f"{name}: (IA)³ vector {shape} fits neither {in_features} nor {out_features}", field=name
            )
    if ".lora_" not in key and ".ia3_" not in key:
        parameter_key = key.removeprefix("base_model.model.")
        expected = parameters.get(parameter_key)
        if expected is None:
            matches = [p for p in parameters if p.endswith("." + parameter_key) or parameter_key.endswith("." + p)]
            expected = parameters[matches[0]] if matches else None
        if expected is None:
            raise IncompatibleAdapterError(f"module {parameter_key} is missing from the base model", field=parameter_key)
        if expected != shape:
            what = "label set" if shape and len(shape) >= 1 and expected[1:] == shape[1:] else parameter_key
            raise IncompatibleAdapterError(
                f"{parameter_key}: adapter tensor {shape} != base {expected}"
                + (" (the head has another number of labels)" if what == "label set" else ""),
                field="labels" if what == "label set" else parameter_key,
            )
