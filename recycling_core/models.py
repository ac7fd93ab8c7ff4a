"""Base models: inspection of Hugging Face directories, architecture signatures and loading.

A base model directory is a plain Hugging Face directory (``config.json``, ``*.safetensors``,
tokenizer files). Only safetensors weights are accepted and remote code is never trusted.
"""

from __future__ import annotations

import copy
import hashlib
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from recycling_core.errors import InvalidModelError
from recycling_core.files import file_manifest, manifest_digest, refuse_pickle_files

ModelKind = Literal["encoder", "causal"]

SIGNATURE_CONFIG_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@dataclass(frozen=True)
class ModelInfo:
    """What a base model directory holds, without loading its weights."""

    path: Path
    kind: ModelKind
    model_type: str
    model_class: str
    signature: dict[str, Any]
    manifest: dict[str, str]
    fingerprint: str


@dataclass
class LoadedBase:
    """A base model loaded for a task, with its tokenizer."""

    info: ModelInfo
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    initialized_keys: tuple[str, ...] = ()
    """Parameters the checkpoint lacked (a fresh classification head): they travel absolute."""


def model_kind(config: PretrainedConfig) -> ModelKind:
    """Tell whether a config describes a causal LM or an encoder."""
    architectures = config.architectures or []
    if any(name.endswith("ForCausalLM") for name in architectures):
        return "causal"
    if getattr(config, "is_decoder", False) or config.model_type in _CAUSAL_MODEL_TYPES:
        return "causal"
    return "encoder"


_CAUSAL_MODEL_TYPES = {
    "llama", "mistral", "qwen2", "qwen3", "gpt2", "gpt_neox", "gptj", "phi", "phi3", "gemma",
    "gemma2", "opt", "falcon", "mixtral", "smollm3", "olmo", "olmo2",
}


def load_config(path: str | Path) -> PretrainedConfig:
    """Read ``config.json`` of a model directory without trusting remote code."""
    directory = Path(path)
    if not (directory / "config.json").is_file():
        raise InvalidModelError(f"{directory} has no config.json", field="config.json")
    try:
        return AutoConfig.from_pretrained(directory, trust_remote_code=False, local_files_only=True)
    except (ValueError, OSError, KeyError) as error:
        raise InvalidModelError(f"cannot read config.json of {directory}: {error}") from error


def tokenizer_vocabulary_hash(tokenizer: PreTrainedTokenizerBase) -> str:
    """sha256 of the tokenizer's token→id map, independent of file layout."""
    vocabulary = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    digest = hashlib.sha256()
    for token, index in vocabulary:
        digest.update(f"{index}\t{token}\n".encode())
    return digest.hexdigest()


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """Load the tokenizer of a model directory and give it a padding token."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            Path(path), trust_remote_code=False, local_files_only=True
        )
    except (ValueError, OSError) as error:
        raise InvalidModelError(f"cannot load the tokenizer of {path}: {error}") from error
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    return tokenizer


def architecture_signature(config: PretrainedConfig, tokenizer: PreTrainedTokenizerBase) -> dict[str, Any]:
    """Model family, kind, config dimensions and tokenizer vocabulary hash."""
    signature: dict[str, Any] = {"model_type": config.model_type, "kind": model_kind(config)}
    for name in SIGNATURE_CONFIG_FIELDS:
        value = getattr(config, name, None)
        if value is not None:
            signature[name] = value
    signature["tokenizer_vocab_sha256"] = tokenizer_vocabulary_hash(tokenizer)
    return signature


def inspect_model_dir(path: str | Path) -> ModelInfo:
    """Validate a base model directory and describe it (manifest, signature, class).

    Raises UnsafeFileError for pickle files and InvalidModelError for a directory that is not a
    loadable Hugging Face model with safetensors weights.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise InvalidModelError(f"{directory} is not a directory")
    refuse_pickle_files(directory)
    config = load_config(directory)
    if not any(directory.glob("*.safetensors")):
        raise InvalidModelError(
            f"{directory} holds no *.safetensors weights", field="model.safetensors"
        )
    tokenizer = load_tokenizer(directory)
    manifest = file_manifest(directory)
    architectures = config.architectures or [type(config).__name__.replace("Config", "Model")]
    return ModelInfo(
        path=directory,
        kind=model_kind(config),
        model_type=config.model_type,
        model_class=architectures[0],
        signature=architecture_signature(config, tokenizer),
        manifest=manifest,
        fingerprint=manifest_digest(manifest),
    )


@dataclass(frozen=True)
class HeadSpec:
    """How a task is read off a model: class labels for encoders, label words for causal LMs."""

    labels: tuple[str, ...] = ()
    generation: bool = False

    @property
    def num_labels(self) -> int:
        return len(self.labels)


def load_base_model(info: ModelInfo, head: HeadSpec, *, seed: int = 0) -> LoadedBase:
    """Load a base model for a task: a sequence classifier for encoders, a causal LM otherwise.

    The classification head of an encoder starts from a seeded random init; trained heads come
    from the adapter, never from here.
    """
    tokenizer = load_tokenizer(info.path)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            if info.kind == "encoder":
                if head.generation:
                    raise InvalidModelError(
                        f"{info.path} is an encoder; generation tasks need a causal LM",
                        field="kind",
                    )
                label2id = {label: index for index, label in enumerate(head.labels)}
                model, loading = AutoModelForSequenceClassification.from_pretrained(
                    info.path,
                    output_loading_info=True,
                    num_labels=head.num_labels,
                    label2id=label2id,
                    id2label={index: label for label, index in label2id.items()},
                    trust_remote_code=False,
                    local_files_only=True,
                    attn_implementation="eager",
                    use_safetensors=True,
                )
            else:
                model, loading = AutoModelForCausalLM.from_pretrained(
                    info.path,
                    output_loading_info=True,
                    trust_remote_code=False,
                    local_files_only=True,
                    attn_implementation="eager",
                    use_safetensors=True,
                )
        except (OSError, ValueError, RuntimeError) as error:
            raise InvalidModelError(f"cannot load {info.path}: {error}") from error
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    parameter_names = {name for name, _ in model.named_parameters()}
    initialized = tuple(sorted(set(loading["missing_keys"]) & parameter_names))
    return LoadedBase(info=info, model=model, tokenizer=tokenizer, initialized_keys=initialized)


@dataclass
class BaseModelCache:
    """Keeps recently used base models in memory; hands out private copies.

    A worker recycling many adapters of one base loads the base once; every job still gets its
    own copy, since adapters are injected into the model in place.
    """

    max_items: int = 2
    device: str | None = None
    """Where the cached copies live: ``"cuda"`` keeps them on the GPU, so a job's private copy
    is a device-to-device copy instead of a load from disk and a host-to-device transfer."""
    _items: OrderedDict[tuple[str, str, HeadSpec], LoadedBase] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    hits: int = 0
    misses: int = 0

    def get(self, info: ModelInfo, head: HeadSpec, *, seed: int = 0) -> LoadedBase:
        """Return a private copy of the base model, loading it on a miss."""
        key = (info.fingerprint, str(info.path), head)
        with self._lock:
            cached = self._items.get(key)
            if cached is not None:
                self._items.move_to_end(key)
                self.hits += 1
        if cached is None:
            cached = load_base_model(info, head, seed=seed)
            if self.device is not None:
                cached.model.to(self.device)
            with self._lock:
                self.misses += 1
                self._items[key] = cached
                while len(self._items) > self.max_items:
                    self._items.popitem(last=False)
        return LoadedBase(
            info=info,
            model=copy.deepcopy(cached.model),
            tokenizer=cached.tokenizer,
            initialized_keys=cached.initialized_keys,
        )


def get_base(
    info: ModelInfo, head: HeadSpec, *, seed: int = 0, cache: BaseModelCache | None = None
) -> LoadedBase:
    """Load a base through the cache when one is given."""
    if cache is not None:
        return cache.get(info, head, seed=seed)
    return load_base_model(info, head, seed=seed)


def describe_model_dir(path: str | Path) -> dict[str, Any]:
    """JSON-friendly summary of a model directory (used by the command line)."""
    info = inspect_model_dir(path)
    return {
        "path": str(info.path),
        "kind": info.kind,
        "model_type": info.model_type,
        "model_class": info.model_class,
        "signature": info.signature,
        "fingerprint": info.fingerprint,
        "files": len(info.manifest),
    }
