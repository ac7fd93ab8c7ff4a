"""Adapted models: a base model plus adapted weights (PEFT LoRA / (IA)³ / prompt or a full delta).

:class:`AdaptedModel` is the one object the training loop, the methods and the metrics work on.
It knows how to start fresh, how to load an adapter directory strictly (every tensor used, every
shape right), which parameters train, how to snapshot and restore the trainable state, how to
save in PEFT layout, and how to give the merged parameters that interpolation needs.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from peft import (
    IA3Config,
    LoraConfig,
    PeftConfig,
    PeftModel,
    PromptTuningConfig,
    TaskType,
    get_peft_model,
    get_peft_model_state_dict,
    set_peft_model_state_dict,
)

from recycling_core.adapters import (
    ADAPTER_CONFIG_NAME,
    FULL_CHECKPOINT,
    FULL_DELTA,
    TRAINABLE_PEFT_NAMES,
    AdapterInfo,
    load_adapter_weights,
    load_full_delta,
    save_full_delta,
    write_label2id,
    write_provenance,
)
from recycling_core.errors import ConfigError, IncompatibleAdapterError
from recycling_core.models import LoadedBase


@dataclass(frozen=True)
class AdapterOptions:
    """Hyperparameters of a fresh adapter."""

    peft: str = "lora"
    lora_rank: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    target_modules: tuple[str, ...] | None = None
    num_virtual_tokens: int = 8

    def __post_init__(self) -> None:
        if self.peft not in TRAINABLE_PEFT_NAMES:
            raise ConfigError(
                f"unknown adapter type {self.peft!r}; choose one of {sorted(TRAINABLE_PEFT_NAMES)}",
                field="peft",
            )
        if self.lora_rank < 1:
            raise ConfigError("lora_rank must be at least 1", field="lora_rank")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ConfigError("lora_dropout must be in [0, 1)", field="lora_dropout")


def _task_type(base: LoadedBase) -> TaskType:
    return TaskType.SEQ_CLS if base.info.kind == "encoder" else TaskType.CAUSAL_LM


def _fresh_peft_config(base: LoadedBase, options: AdapterOptions) -> PeftConfig:
    task_type = _task_type(base)
    targets = list(options.target_modules) if options.target_modules else None
    if options.peft == "lora":
        return LoraConfig(
            task_type=task_type,
            r=options.lora_rank,
            lora_alpha=options.lora_alpha,
            lora_dropout=options.lora_dropout,
            target_modules=targets,
        )
    if options.peft == "ia3":
        return IA3Config(task_type=task_type, target_modules=targets, feedforward_modules=[] if targets else None)
    return PromptTuningConfig(task_type=task_type, num_virtual_tokens=options.num_virtual_tokens)


@dataclass
class AdaptedModel:
    """A base model with adapted weights attached; ``model`` is what forward passes use."""

    base: LoadedBase
    model: torch.nn.Module
    peft_type: str
    label2id: dict[str, int] | None
    _base_state: dict[str, torch.Tensor] | None = field(default=None, repr=False)

    @property
    def is_full(self) -> bool:
        return self.peft_type == FULL_DELTA

    @property
    def is_peft(self) -> bool:
        return isinstance(self.model, PeftModel)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """A detached CPU copy of everything that trains (for best-checkpoint and resume)."""
        if self.is_peft:
            state = get_peft_model_state_dict(self.model)
        else:
            state = {name: p for name, p in self.model.named_parameters() if p.requires_grad}
        return {name: tensor.detach().to("cpu", copy=True) for name, tensor in state.items()}

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore a snapshot taken by :meth:`trainable_state`."""
        if self.is_peft:
            assert isinstance(self.model, PeftModel)
            load_peft_state_strictly(self.model, state, "snapshot")
            return
        parameters = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, tensor in state.items():
                parameters[name].copy_(tensor.to(parameters[name].device))

    def to(self, device: torch.device) -> AdaptedModel:
        self.model.to(device)
        return self

    def save(self, directory: str | Path, provenance: dict[str, Any] | None = None) -> Path:
        """Write the adapter: PEFT layout for PEFT types, FULL_DELTA for full fine-tuning.

        ``recycling.json`` beside it records the base's signature (for compatibility checks)
        and any lineage given in ``provenance``.
        """
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        write_provenance(
            target,
            {
                "base_signature": self.base.info.signature,
                "base_fingerprint": self.base.info.fingerprint,
                "peft_type": self.peft_type,
                **(provenance or {}),
            },
        )
        if self.is_full:
            delta, head = self.full_delta()
            return save_full_delta(
                target,
                delta,
                head,
                base_fingerprint=self.base.info.fingerprint,
                base_path=str(self.base.info.path),
                task_kind="generation" if self.label2id is None else "classification",
                label2id=self.label2id,
            )
        assert isinstance(self.model, PeftModel)
        self.model.save_pretrained(str(target), safe_serialization=True)
        config_path = target / ADAPTER_CONFIG_NAME
        config = json.loads(config_path.read_text())
        config["base_model_name_or_path"] = str(self.base.info.path)
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True))
        write_label2id(target, self.label2id)
        return target

    def full_delta(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """(tuned − base for base parameters, absolute values of the fresh head)."""
        assert self._base_state is not None
        head_keys = set(self.base.initialized_keys)
        delta: dict[str, torch.Tensor] = {}
        head: dict[str, torch.Tensor] = {}
        for name, parameter in self.model.named_parameters():
            value = parameter.detach().float().cpu()
            if name in head_keys:
                head[name] = value.clone()
            elif name in self._base_state:
                difference = value - self._base_state[name].float()
                if torch.count_nonzero(difference):
                    delta[name] = difference
        return delta, head

    def merged_model(self) -> torch.nn.Module:
        """A plain model with the adapter merged into its weights (a copy; self is untouched)."""
        if self.is_full:
            return copy.deepcopy(self.model)
        assert isinstance(self.model, PeftModel)
        if self.peft_type == "PROMPT_TUNING":
            raise ConfigError("prompt-tuning adapters cannot be merged into the weights", field="peft_type")
        return copy.deepcopy(self.model).merge_and_unload()


def new_adapter(
    base: LoadedBase, options: AdapterOptions, label2id: dict[str, int] | None, *, seed: int = 0
) -> AdaptedModel:
    """A fresh adapter on a base (the ``fresh`` and ``distill`` starting point).

    Its random initialisation (LoRA's A matrices, random prompt embeddings) is drawn from
    ``seed``, so that a run is reproducible from its report; the global RNG is left as it was.
    """
    if options.peft == "full":
        for parameter in base.model.parameters():
            parameter.requires_grad_(True)
        return AdaptedModel(
            base=base,
            model=base.model,
            peft_type=FULL_DELTA,
            label2id=label2id,
            _base_state=_snapshot(base.model, exclude=set(base.initialized_keys)),
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = get_peft_model(base.model, _fresh_peft_config(base, options))
    return AdaptedModel(base=base, model=model, peft_type=TRAINABLE_PEFT_NAMES[options.peft], label2id=label2id)


def _snapshot(model: torch.nn.Module, exclude: set[str]) -> dict[str, torch.Tensor]:
    return {
        name: p.detach().to("cpu", copy=True)
        for name, p in model.named_parameters()
        if name not in exclude
    }


def attach_adapter(base: LoadedBase, info: AdapterInfo, *, trainable: bool) -> AdaptedModel:
    """Put an existing adapter on a base, strictly: unused or missing adapter tensors are errors.

    Run :func:`recycling_core.compat.check_compatibility` first for friendlier messages; this
    function still refuses anything that would load partially.
    """
    if info.peft_type == FULL_CHECKPOINT:
        raise ConfigError(
            "a full fine-tuned checkpoint must first be turned into a delta against its own base "
            "(full_checkpoint_to_delta)",
            field="peft_type",
        )
    if info.peft_type == FULL_DELTA:
        return _attach_full_delta(base, info, trainable=trainable)
    config = PeftConfig.from_pretrained(str(info.path))
    config.inference_mode = not trainable
    config.base_model_name_or_path = base.model.name_or_path  # the base it now sits on
    try:
        model = get_peft_model(base.model, config)
    except ValueError as error:  # PEFT: "Target modules ... not found in the base model"
        raise IncompatibleAdapterError(
            f"the adapter's target modules do not fit the base: {error}", field="target_modules"
        ) from error
    load_peft_state_strictly(model, load_adapter_weights(info), "adapter")
    if not trainable:
        for parameter in model.parameters():
            parameter.requires_grad_(False)
    return AdaptedModel(base=base, model=model, peft_type=info.peft_type, label2id=info.label2id)


_ADAPTER_KEY_MARKERS = ("lora_", "ia3_", "prompt", "modules_to_save")


def load_peft_state_strictly(model: PeftModel, state: dict[str, torch.Tensor], what: str) -> None:
    """Load adapter tensors into a PEFT model; unused or missing adapter tensors are errors.

    PEFT's own loader returns ``_IncompatibleKeys`` instead of raising. Prompt-learning
    embeddings are loaded by PEFT apart from the module state (they always show up as
    "unexpected" there), so they are checked by name instead. A missing ``modules_to_save``
    tensor (a trained classifier head) is an error too: a random head must never silently
    replace a trained one.
    """
    prompt_learning = model.peft_config[model.active_adapter].is_prompt_learning
    if prompt_learning and "prompt_embeddings" not in state:
        raise IncompatibleAdapterError(f"the {what} lacks the prompt_embeddings tensor", field="prompt_embeddings")
    try:
        result = set_peft_model_state_dict(model, state)
    except KeyError as error:  # PEFT looks up modules_to_save tensors (e.g. a trained head) by name
        key = str(error.args[0]) if error.args else "?"
        raise IncompatibleAdapterError(f"the {what} lacks the tensor {key} (missing from the file)", field=key) from error
    except RuntimeError as error:
        raise IncompatibleAdapterError(f"{what} tensors do not fit the base: {error}") from error
    unused = sorted(set(result.unexpected_keys) - ({"prompt_embeddings"} if prompt_learning else set()))
    if unused:
        raise IncompatibleAdapterError(
            f"{len(unused)} {what} tensors would be left unused, e.g. {unused[0]}", field=unused[0]
        )
    missing = [
        key
        for key in result.missing_keys
        if any(marker in key for marker in _ADAPTER_KEY_MARKERS)
        and not (prompt_learning and key.startswith("prompt_encoder."))
    ]
    if missing:
        raise IncompatibleAdapterError(
            f"{len(missing)} {what} tensors are missing from the file, e.g. {missing[0]}", field=missing[0]
        )


def _attach_full_delta(base: LoadedBase, info: AdapterInfo, *, trainable: bool) -> AdaptedModel:
    delta, head = load_full_delta(info)
    parameters = dict(base.model.named_parameters())
    base_state = _snapshot(base.model, exclude=set(base.initialized_keys))
    with torch.no_grad():
        for name, tensor in {**delta, **head}.items():
            if name not in parameters:
                raise IncompatibleAdapterError(f"delta tensor {name} has no parameter in the base", field=name)
            if tuple(parameters[name].shape) != tuple(tensor.shape):
                raise IncompatibleAdapterError(
                    f"{name}: delta shape {tuple(tensor.shape)} != base shape {tuple(parameters[name].shape)}",
                    field=name,
                )
            if name in head:
                parameters[name].copy_(tensor.to(parameters[name].dtype))
            else:
                parameters[name].add_(tensor.to(parameters[name].device, parameters[name].dtype))
    for parameter in base.model.parameters():
        parameter.requires_grad_(trainable)
    return AdaptedModel(
        base=base, model=base.model, peft_type=FULL_DELTA, label2id=info.label2id, _base_state=base_state
    )


def full_checkpoint_to_delta(info: AdapterInfo, old_base: LoadedBase, directory: str | Path) -> AdapterInfo:
    """Turn a full fine-tuned HF checkpoint into a FULL_DELTA adapter against its own base."""
    from recycling_core.adapters import inspect_adapter_dir

    tuned = load_adapter_weights(info)
    base_parameters = dict(old_base.model.named_parameters())
    head_keys = set(old_base.initialized_keys)
    delta: dict[str, torch.Tensor] = {}
    head: dict[str, torch.Tensor] = {}
    aliases = _checkpoint_aliases(tuned, base_parameters)
    for name, parameter in base_parameters.items():
        key = aliases.get(name)
        if key is None:
            if name in head_keys:
                raise IncompatibleAdapterError(f"checkpoint lacks the trained head tensor {name}", field=name)
            continue
        value = tuned[key].float()
        if tuple(value.shape) != tuple(parameter.shape):
            raise IncompatibleAdapterError(
                f"{name}: checkpoint shape {tuple(value.shape)} != base shape {tuple(parameter.shape)}",
                field=name,
            )
        if name in head_keys:
            head[name] = value
        else:
            difference = value - parameter.detach().float().cpu()
            if torch.count_nonzero(difference):
                delta[name] = difference
    save_full_delta(
        directory,
        delta,
        head,
        base_fingerprint=old_base.info.fingerprint,
        base_path=str(old_base.info.path),
        task_kind="classification" if info.label2id else "generation",
        label2id=info.label2id,
    )
    return inspect_adapter_dir(directory)


def _checkpoint_aliases(tuned: dict[str, torch.Tensor], parameters: dict[str, Any]) -> dict[str, str]:
    """Map each model parameter name to the checkpoint key holding it (prefixes may differ)."""

    def suffixes(name: str) -> list[str]:
        parts = name.split(".")
        return [".".join(parts[i:]) for i in range(len(parts))]

    by_suffix: dict[str, str] = {}
    for key in tuned:
        for suffix in suffixes(key):
            by_suffix.setdefault(suffix, key)
    aliases: dict[str, str] = {}
    for name in parameters:
        match = next((s for s in suffixes(name) if s in tuned), None) or by_suffix.get(name)
        if match is not None:
            aliases[name] = match
    return aliases
