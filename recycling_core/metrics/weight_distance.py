"""How far the upgraded weights moved from the old ones (DESIGN §6: weight distance M0→M1).

Sums are accumulated in float64 on the CPU, tensor by tensor and chunk by chunk, so two
multi-gigabyte state dicts are compared without concatenating them or holding a float64 copy
of a whole large tensor.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import torch

from recycling_core.reports import WeightDistance

GroupBy = Literal["module", "parameter", "none"]

_CHUNK_ELEMENTS = 1 << 22
_PARAM_SUFFIXES = (".weight", ".bias")


@dataclass
class _Sums:
    """Running float64 sums of one group: Σa², Σb², Σ(b−a)², Σa·b."""

    aa: float = 0.0
    bb: float = 0.0
    diff: float = 0.0
    ab: float = 0.0

    def add(self, other: _Sums) -> None:
        self.aa += other.aa
        self.bb += other.bb
        self.diff += other.diff
        self.ab += other.ab


def _strip_param_suffix(name: str) -> str:
    for suffix in _PARAM_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _layer_index_position(parts: list[str]) -> int | None:
    for position, part in enumerate(parts):
        if part.isdigit():
            return position
    return None


def _wrapper_prefixes(names: Iterable[str]) -> set[str]:
    """Prefixes that wrap a layer list (``model`` in ``model.layers.3``, ``bert`` and
    ``bert.encoder`` in ``bert.encoder.layer.3``); the list container itself is excluded."""
    wrappers: set[str] = set()
    for name in names:
        parts = name.split(".")
        position = _layer_index_position(parts)
        if position is None:
            continue
        for length in range(1, position):
            wrappers.add(".".join(parts[:length]))
    return wrappers


def module_group(name: str, wrappers: set[str] | None = None) -> str:
    """The ``per_module`` group of a parameter name.

    A parameter inside a numbered layer is grouped by the name up to and including the first
    numeric component (``model.layers.11.self_attn.q_proj.weight`` → ``model.layers.11``,
    ``encoder.layer.3.output.dense.bias`` → ``encoder.layer.3``). Any other parameter is grouped
    by its module directly below the innermost wrapper of the layer list (``model.embed_tokens``,
    ``bert.embeddings``, ``transformer.ln_f``) or, outside any wrapper, by its first component
    (``embeddings``, ``lm_head``, ``classifier``).

    Args:
        name: parameter name as in a state dict.
        wrappers: prefixes that wrap a layer list, from the whole state dict; computed from
            ``name`` alone when omitted.
    """
    stripped = _strip_param_suffix(name)
    parts = stripped.split(".")
    position = _layer_index_position(parts)
    if position is not None:
        return ".".join(parts[: position + 1])
    known = wrappers if wrappers is not None else _wrapper_prefixes([name])
    for length in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:length]) in known:
            return ".".join(parts[: length + 1])
    return parts[0]


def module_groups(names: Iterable[str]) -> dict[str, str]:
    """Map every parameter name of one state dict to its :func:`module_group`.

    The wrappers of the layer list are taken from all ``names`` together, so non-layer
    parameters land next to the layers (``model.embed_tokens`` rather than ``model``).
    """
    name_list = list(names)
    wrappers = _wrapper_prefixes(name_list)
    return {name: module_group(name, wrappers) for name in name_list}


def _pair_sums(a: torch.Tensor, b: torch.Tensor) -> _Sums:
    flat_a = a.detach().reshape(-1)
    flat_b = b.detach().reshape(-1)
    sums = _Sums()
    for start in range(0, flat_a.numel(), _CHUNK_ELEMENTS):
        chunk_a = flat_a[start : start + _CHUNK_ELEMENTS].to("cpu", torch.float64)
        chunk_b = flat_b[start : start + _CHUNK_ELEMENTS].to("cpu", torch.float64)
        sums.aa += float(torch.dot(chunk_a, chunk_a))
        sums.bb += float(torch.dot(chunk_b, chunk_b))
        sums.ab += float(torch.dot(chunk_a, chunk_b))
        delta = chunk_b - chunk_a
        sums.diff += float(torch.dot(delta, delta))
    return sums


def _storage_key(tensor: torch.Tensor) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
    return (
        tensor.untyped_storage().data_ptr(),
        tensor.storage_offset(),
        tuple(tensor.shape),
        tuple(tensor.stride()),
    )


def weight_distance(
    state_a: Mapping[str, torch.Tensor],
    state_b: Mapping[str, torch.Tensor],
    group_by: GroupBy = "module",
) -> WeightDistance:
    """Relative L2 change and cosine similarity from ``state_a`` (e.g. M0) to ``state_b`` (M1).

    Only floating-point tensors present in both state dicts with equal shapes are compared;
    the rest (new or resized parameters, integer buffers) are skipped. A tensor tied to an
    earlier one in both dicts (same memory, e.g. ``lm_head.weight`` and the input embedding) is
    counted once.

    - ``relative_l2`` = ‖b − a‖ / ‖a‖ over all compared tensors taken together;
    - ``cosine`` = ⟨a, b⟩ / (‖a‖·‖b‖) of the two flattened concatenations;
    - ``per_module`` = relative L2 per group (see :func:`module_group`; ``"parameter"`` uses
      the full names, ``"none"`` leaves it empty). A group whose reference weights are all zero
      has no relative change and is left out.

    Args:
        state_a: reference weights.
        state_b: changed weights.
        group_by: ``"module"`` (default), ``"parameter"`` or ``"none"``.

    Raises:
        ValueError: when no tensor is shared, when either side is all zeros, or on an unknown
            ``group_by``.
    """
    if group_by not in ("module", "parameter", "none"):
        raise ValueError(f"unknown group_by {group_by!r}")
    shared = [
        name
        for name, a in state_a.items()
        if name in state_b
        and a.is_floating_point()
        and state_b[name].is_floating_point()
        and a.shape == state_b[name].shape
        and a.device.type != "meta"
        and state_b[name].device.type != "meta"
    ]
    if not shared:
        raise ValueError("the two state dicts share no floating tensor of equal shape")
    group_of = module_groups(shared) if group_by == "module" else {name: name for name in shared}

    total = _Sums()
    groups: dict[str, _Sums] = {}
    seen: set[tuple[object, ...]] = set()
    for name in shared:
        a, b = state_a[name], state_b[name]
        if a.numel() > 0:
            alias = (_storage_key(a), _storage_key(b))
            if alias in seen:
                continue
            seen.add(alias)
        sums = _pair_sums(a, b)
        total.add(sums)
        if group_by == "none":
            continue
        groups.setdefault(group_of[name], _Sums()).add(sums)

    if total.aa == 0.0 or total.bb == 0.0:
        raise ValueError("relative change and cosine are undefined: one side is all zeros")
    per_module = {
        key: math.sqrt(sums.diff / sums.aa) for key, sums in groups.items() if sums.aa > 0.0
    }
    return WeightDistance(
        relative_l2=math.sqrt(total.diff / total.aa),
        cosine=total.ab / math.sqrt(total.aa * total.bb),
        per_module=per_module,
    )
