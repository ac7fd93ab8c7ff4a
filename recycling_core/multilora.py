"""Several LoRA adapters on one frozen base, trained or evaluated in one batched pass.

The technique of multi-LoRA trainers (mLoRA/ASPEN) and of S-LoRA's batched kernels: the rows of
one batch belong to different adapters ("slots"), every frozen base weight is read once per
step for all of them, and each slot's low-rank path touches only its own rows. A slot's
gradient comes from its own rows alone, so training N slots together follows the same
trajectory as training each alone (up to the rounding of the larger matrix products).

:class:`MultiLoraModel` is built from PEFT LoRA models that sit on the same base: it copies the
base once, swaps every LoRA layer for a :class:`MultiLoraLinear` holding all slots' A and B as
stacked tensors, swaps every ``modules_to_save`` head for one :class:`SlotModules` with a copy per
slot, and writes the trained weights back into the PEFT models at the end. Ranks may differ
(smaller ranks are zero-padded, and zero padding stays zero under training).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from peft import PeftModel
from peft.tuners.lora import LoraLayer
from peft.utils.other import ModulesToSaveWrapper
from torch import nn

from recycling_core.errors import ConfigError

ADAPTER_NAME = "default"


@dataclass
class SlotRouting:
    """Which rows of the current batch belong to which slot; shared by every batched layer.

    ``active`` set: every row goes through that one slot (evaluating one adapter). Otherwise
    ``sizes`` gives the number of consecutive rows per slot, in slot order.
    """

    sizes: tuple[int, ...] = ()
    active: int | None = None

    def split(self, tensor: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.split(tensor, list(self.sizes), dim=0)

    @property
    def uniform(self) -> bool:
        return len(set(self.sizes)) == 1


def _lora_add(base_out: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b_scaled: torch.Tensor) -> torch.Tensor:
    """base_out + (x Aᵀ)(s·B)ᵀ with the addition done in the second product's epilogue."""
    hidden = F.linear(x, a)
    out_features = base_out.size(-1)
    flat = torch.addmm(
        base_out.reshape(-1, out_features),
        hidden.reshape(-1, hidden.size(-1)),
        b_scaled.t().to(hidden.dtype),
    )
    return flat.view(base_out.shape)


class MultiLoraLinear(nn.Module):
    """A frozen ``nn.Linear`` plus one LoRA path per slot, routed by :class:`SlotRouting`."""

    def __init__(
        self,
        base: nn.Linear,
        routing: SlotRouting,
        ranks: Sequence[int],
        scalings: Sequence[float],
        dropout: float,
    ) -> None:
        super().__init__()
        self.base = base
        for parameter in self.base.parameters():
            parameter.requires_grad_(False)
        self.routing = routing
        slots, rank = len(ranks), max(ranks)
        device = base.weight.device
        self.lora_A = nn.Parameter(torch.zeros(slots, rank, base.in_features, device=device))
        self.lora_B = nn.Parameter(torch.zeros(slots, base.out_features, rank, device=device))
        self.register_buffer("scaling", torch.tensor(list(scalings), dtype=torch.float32, device=device))
        self.dropout = dropout

    def _dropped(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, self.dropout, training=True) if self.dropout and self.training else x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)
        routing = self.routing
        if routing.active is not None:
            slot = routing.active
            b_scaled = self.lora_B[slot] * self.scaling[slot]
            return _lora_add(out, self._dropped(x), self.lora_A[slot], b_scaled)
        b_scaled = self.lora_B * self.scaling.view(-1, 1, 1)
        if len(routing.sizes) == 1:
            return _lora_add(out, self._dropped(x), self.lora_A[0], b_scaled[0])
        if routing.uniform:
            slots = len(routing.sizes)
            grouped = self._dropped(x).reshape(slots, -1, x.size(-1))
            hidden = torch.bmm(grouped, self.lora_A.transpose(1, 2).to(grouped.dtype))
            out_grouped = out.reshape(slots, -1, out.size(-1))
            summed = torch.baddbmm(out_grouped, hidden, b_scaled.transpose(1, 2).to(hidden.dtype))
            return summed.view(out.shape)
        pieces = [
            _lora_add(out_rows, self._dropped(x_rows), self.lora_A[slot], b_scaled[slot])
            for slot, (out_rows, x_rows) in enumerate(zip(routing.split(out), routing.split(x)))
        ]
        return torch.cat(pieces, dim=0)


class SlotModules(nn.Module):
    """One trainable copy of a module per slot (a classifier head); outputs zero-padded to one width."""

    def __init__(self, modules: Sequence[nn.Module], routing: SlotRouting) -> None:
        super().__init__()
        self.slots = nn.ModuleList(modules)
        self.routing = routing

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        routing = self.routing
        if routing.active is not None:
            return self.slots[routing.active](x, *args, **kwargs)
        outputs = [module(rows, *args, **kwargs) for module, rows in zip(self.slots, routing.split(x))]
        width = max(output.size(-1) for output in outputs)
        padded = [F.pad(output, (0, width - output.size(-1))) for output in outputs]
        return torch.cat(padded, dim=0)


@dataclass(frozen=True)
class _LoraSite:
    rank: int
    scaling: float
    dropout: float


def _relative_path(name: str) -> str:
    return name.removeprefix("base_model.model.")


def _lora_sites(peft_model: PeftModel) -> dict[str, _LoraSite]:
    sites: dict[str, _LoraSite] = {}
    for name, module in peft_model.named_modules():
        if isinstance(module, LoraLayer) and ADAPTER_NAME in module.lora_A:
            dropout = module.lora_dropout[ADAPTER_NAME]
            sites[_relative_path(name)] = _LoraSite(
                rank=int(module.r[ADAPTER_NAME]),
                scaling=float(module.scaling[ADAPTER_NAME]),
                dropout=float(getattr(dropout, "p", 0.0)),
            )
    return sites


def _head_paths(peft_model: PeftModel) -> list[str]:
    return [
        _relative_path(name)
        for name, module in peft_model.named_modules()
        if isinstance(module, ModulesToSaveWrapper)
    ]


def batching_obstacle(models: Sequence[torch.nn.Module], fingerprints: Sequence[str]) -> str | None:
    """Why these adapted models cannot share one batched pass, or None when they can."""
    if not models:
        return "no models"
    if len(set(fingerprints)) != 1:
        return "the adapters sit on different bases"
    reference_sites: dict[str, _LoraSite] | None = None
    reference_heads: list[str] | None = None
    for model in models:
        if not isinstance(model, PeftModel):
            return "only PEFT LoRA adapters can be batched"
        config = model.peft_config.get(ADAPTER_NAME)
        if config is None or config.peft_type.value != "LORA":
            return "only LoRA adapters can be batched"
        if getattr(config, "use_dora", False) or getattr(config, "bias", "none") != "none":
            return "DoRA and LoRA biases are not batched"
        sites = _lora_sites(model)
        if not sites:
            return "the adapter has no LoRA layer"
        heads = _head_paths(model)
        if reference_sites is None:
            reference_sites, reference_heads = sites, heads
            continue
        if set(sites) != set(reference_sites):
            return "the adapters target different modules"
        if {site.dropout for site in sites.values()} != {site.dropout for site in reference_sites.values()}:
            return "the adapters use different LoRA dropout"
        if heads != reference_heads:
            return "the adapters train different extra modules"
        trainable = {name for name, p in model.named_parameters() if p.requires_grad}
        if any("lora_" not in name and "modules_to_save" not in name for name in trainable):
            return "the adapter trains parameters outside its LoRA layers and heads"
    return None


def _structural_copy(model: nn.Module) -> nn.Module:
    """A copy of the module tree that shares every parameter and buffer with the original.

    The frozen base weights are never written by training, so the batched model needs no copy
    of them; only the modules it swaps out are its own.
    """
    shared = {id(tensor): tensor for tensor in (*model.parameters(), *model.buffers())}
    return copy.deepcopy(model, memo=shared)


def _set_submodule(root: nn.Module, path: str, module: nn.Module) -> None:
    parent_path, _, child = path.rpartition(".")
    parent = root.get_submodule(parent_path) if parent_path else root
    setattr(parent, child, module)


def cast_frozen_linears(model: nn.Module, dtype: torch.dtype) -> None:
    """Store frozen linear weights in ``dtype`` (autocast would cast them on every forward).

    Weights tied to an embedding stay as they are, so the residual stream keeps its dtype.
    """
    tied = {id(module.weight) for module in model.modules() if isinstance(module, nn.Embedding)}
    for module in model.modules():
        if isinstance(module, nn.Linear) and not module.weight.requires_grad and id(module.weight) not in tied:
            module.to(dtype)


class MultiLoraModel(nn.Module):
    """One copy of a frozen base with N LoRA slots; ``routing`` decides which rows use which slot."""

    def __init__(
        self, members: Sequence[PeftModel], *, base_dtype: torch.dtype | None = None, rank: int | None = None
    ) -> None:
        super().__init__()
        if not members:
            raise ConfigError("a batched model needs at least one adapter", field="adapters")
        self.routing = SlotRouting(sizes=(1,) * len(members))
        self.members = list(members)
        first = members[0]
        sites_per_member = [_lora_sites(member) for member in members]
        self.site_paths = sorted(sites_per_member[0])
        self.head_paths = _head_paths(first)
        model = _structural_copy(first.get_base_model())
        for path in self.site_paths:
            lora_layer = model.get_submodule(path)
            base_layer = lora_layer.get_base_layer()
            if not isinstance(base_layer, nn.Linear):
                raise ConfigError(f"{path}: only linear layers can be batched", field="target_modules")
            sites = [sites_per_member[i][path] for i in range(len(members))]
            replacement = MultiLoraLinear(
                base_layer,
                self.routing,
                ranks=[max(site.rank, rank or 0) for site in sites],
                scalings=[site.scaling for site in sites],
                dropout=sites[0].dropout,
            )
            _set_submodule(model, path, replacement)
        for path in self.head_paths:
            heads = []
            for member in members:
                wrapper = member.get_submodule("base_model.model." + path)
                heads.append(copy.deepcopy(wrapper.modules_to_save[ADAPTER_NAME]))
            _set_submodule(model, path, SlotModules(heads, self.routing))
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        self.model = model
        # The modules stay the same objects from here on (.to() and torch.compile keep them).
        self._lora_layers: list[MultiLoraLinear] = [model.get_submodule(p) for p in self.site_paths]  # type: ignore[misc]
        self._slot_heads: list[SlotModules] = [model.get_submodule(p) for p in self.head_paths]  # type: ignore[misc]
        for layer in self.lora_layers():
            layer.lora_A.requires_grad_(True)
            layer.lora_B.requires_grad_(True)
        for heads in self.slot_heads():
            for parameter in heads.parameters():
                parameter.requires_grad_(True)
        self.pull_from_members()
        self._head_widths = self._measure_head_widths()
        if base_dtype is not None:
            self.cast_frozen_linears(base_dtype)

    # ------------------------------------------------------------------ structure
    def lora_layers(self) -> list[MultiLoraLinear]:
        return self._lora_layers

    def slot_heads(self) -> list[SlotModules]:
        return self._slot_heads

    @property
    def slots(self) -> int:
        return len(self.members)

    def cast_frozen_linears(self, dtype: torch.dtype) -> None:
        cast_frozen_linears(self.model, dtype)

    def use_fast_attention(self) -> None:
        """Scaled-dot-product attention for training (the base may have been loaded with eager)."""
        setter = getattr(self.model, "set_attn_implementation", None)
        try:
            if setter is not None:
                setter("sdpa")
            else:
                self.model.config._attn_implementation = "sdpa"
        except (ValueError, ImportError):
            pass

    def slot_parameters(self) -> list[nn.Parameter]:
        """Every trainable tensor (stacked LoRA tensors and per-slot heads)."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def head_output_width(self, slot: int) -> int | None:
        """The width of a slot's head output (None when no head: causal LMs read the LM head)."""
        return self._head_widths[slot]

    def _measure_head_widths(self) -> list[int | None]:
        if not self.head_paths:
            return [None] * self.slots
        heads = self.slot_heads()[-1].slots
        return [int(getattr(head, "out_features", 0)) or None for head in heads]

    # ------------------------------------------------------------------ per-slot state
    def named_slot_tensors(self, slot: int) -> list[tuple[str, nn.Parameter, bool]]:
        """(name, parameter, stacked) for one slot; a stacked parameter holds the slot at index ``slot``."""
        items: list[tuple[str, nn.Parameter, bool]] = []
        for path, layer in zip(self.site_paths, self.lora_layers()):
            items.append((f"{path}.lora_A", layer.lora_A, True))
            items.append((f"{path}.lora_B", layer.lora_B, True))
        for path, heads in zip(self.head_paths, self.slot_heads()):
            for name, parameter in heads.slots[slot].named_parameters():
                items.append((f"{path}.head.{name}", parameter, False))
        return items

    def slot_state(self, slot: int) -> dict[str, torch.Tensor]:
        """A detached CPU copy of one slot's trainable weights (best-checkpoint snapshots)."""
        return {
            name: (tensor[slot] if stacked else tensor).detach().to("cpu", copy=True)
            for name, tensor, stacked in self.named_slot_tensors(slot)
        }

    @torch.no_grad()
    def load_slot_state(self, slot: int, state: dict[str, torch.Tensor]) -> None:
        for name, tensor, stacked in self.named_slot_tensors(slot):
            target = tensor[slot] if stacked else tensor
            target.copy_(state[name].to(target.device, target.dtype))

    @torch.no_grad()
    def pull_from_members(self) -> None:
        """Copy each member's current LoRA and head weights into its slot."""
        for slot, member in enumerate(self.members):
            for path, layer in zip(self.site_paths, self.lora_layers()):
                source = member.get_submodule("base_model.model." + path)
                a = source.lora_A[ADAPTER_NAME].weight
                b = source.lora_B[ADAPTER_NAME].weight
                layer.lora_A[slot].zero_()
                layer.lora_B[slot].zero_()
                layer.lora_A[slot, : a.size(0)].copy_(a)
                layer.lora_B[slot, :, : b.size(1)].copy_(b)
            for path, heads in zip(self.head_paths, self.slot_heads()):
                wrapper = member.get_submodule("base_model.model." + path)
                heads.slots[slot].load_state_dict(wrapper.modules_to_save[ADAPTER_NAME].state_dict())

    @torch.no_grad()
    def push_to_members(self) -> None:
        """Write each slot's weights back into its PEFT model (which then saves as usual)."""
        for slot, member in enumerate(self.members):
            for path, layer in zip(self.site_paths, self.lora_layers()):
                target = member.get_submodule("base_model.model." + path)
                a = target.lora_A[ADAPTER_NAME].weight
                b = target.lora_B[ADAPTER_NAME].weight
                a.copy_(layer.lora_A[slot, : a.size(0)].to(a.dtype))
                b.copy_(layer.lora_B[slot, :, : b.size(1)].to(b.dtype))
            for path, heads in zip(self.head_paths, self.slot_heads()):
                wrapper = member.get_submodule("base_model.model." + path)
                wrapper.modules_to_save[ADAPTER_NAME].load_state_dict(heads.slots[slot].state_dict())

    # ------------------------------------------------------------------ forward
    def forward(self, *args, **kwargs):
        return self.model(*args, **kwargs)

    def route(self, sizes: Sequence[int] | None = None, active: int | None = None) -> None:
        self.routing.sizes = tuple(sizes or ())
        self.routing.active = active

    def slot_view(self, slot: int) -> _SlotView:
        """A module that runs every row through one slot (for evaluation with the usual helpers)."""
        return _SlotView(self, slot)

    @torch.no_grad()
    def clip_grad_norm_per_slot(self, max_norm: float) -> torch.Tensor:
        """Clip each slot's gradient to ``max_norm`` on its own (as if each trained alone)."""
        squares = torch.zeros(self.slots, device=self.routing_device())
        stacked, heads = self._grads_by_slot()
        for grad in stacked:
            squares += grad.float().pow(2).flatten(1).sum(dim=1)
        for slot, grads in enumerate(heads):
            for grad in grads:
                squares[slot] += grad.float().pow(2).sum()
        norms = squares.sqrt()
        factors = (max_norm / (norms + 1e-6)).clamp(max=1.0)
        for grad in stacked:
            grad.mul_(factors.view(-1, *([1] * (grad.dim() - 1))).to(grad.dtype))
        for slot, grads in enumerate(heads):
            for grad in grads:
                grad.mul_(factors[slot].to(grad.dtype))
        return norms

    def _grads_by_slot(self) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
        stacked = [
            tensor.grad
            for layer in self.lora_layers()
            for tensor in (layer.lora_A, layer.lora_B)
            if tensor.grad is not None
        ]
        heads: list[list[torch.Tensor]] = [[] for _ in range(self.slots)]
        for module in self.slot_heads():
            for slot, head in enumerate(module.slots):
                heads[slot].extend(p.grad for p in head.parameters() if p.grad is not None)
        return stacked, heads

    def routing_device(self) -> torch.device:
        return self.lora_layers()[0].lora_A.device


class _SlotView:
    """Calls the batched model with one slot active (evaluation through the usual helpers)."""

    def __init__(self, owner: MultiLoraModel, slot: int) -> None:
        self.owner = owner
        self.slot = slot

    def __call__(self, *args, **kwargs):
        routing = self.owner.routing
        saved = (routing.sizes, routing.active)
        routing.active = self.slot
        try:
            return self.owner.model(*args, **kwargs)
        finally:
            routing.sizes, routing.active = saved

    def parameters(self):
        return self.owner.model.parameters()

    @property
    def training(self) -> bool:
        return self.owner.model.training

    def train(self, mode: bool = True) -> _SlotView:
        self.owner.model.train(mode)
        return self

    def eval(self) -> _SlotView:
        return self.train(False)


def _lora_factors(model: PeftModel, path: str) -> tuple[torch.Tensor, torch.Tensor, float]:
    layer = model.get_submodule("base_model.model." + path)
    return layer.lora_A[ADAPTER_NAME].weight, layer.lora_B[ADAPTER_NAME].weight, float(layer.scaling[ADAPTER_NAME])


def interpolation_model(model_a: PeftModel, model_b: PeftModel, alphas: Sequence[float]) -> MultiLoraModel:
    """One slot per α on the shared base: ΔW(α) = (1−α)·ΔW_a + α·ΔW_b, heads lerped.

    The lerp of two low-rank products is itself low rank: [(1−α)·s_a·B_a, α·s_b·B_b]·[A_a; A_b],
    so every point of an adapter-mode sweep is a LoRA of rank r_a + r_b and all points can be
    evaluated in one batched pass. The caller checks that both adapters sit on the same base.
    """
    obstacle = batching_obstacle([model_a, model_b], ["shared", "shared"])
    if obstacle is not None:
        raise ConfigError(f"cannot batch this interpolation: {obstacle}", field="adapters")
    sites_a, sites_b = _lora_sites(model_a), _lora_sites(model_b)
    rank = max(sites_a[path].rank + sites_b[path].rank for path in sites_a)
    batched = MultiLoraModel([model_b] * len(alphas), rank=rank)
    with torch.no_grad():
        for path, layer in zip(batched.site_paths, batched.lora_layers()):
            a_a, b_a, s_a = _lora_factors(model_a, path)
            a_b, b_b, s_b = _lora_factors(model_b, path)
            r_a, r_b = a_a.size(0), a_b.size(0)
            layer.scaling.fill_(1.0)
            for slot, alpha in enumerate(alphas):
                layer.lora_A[slot].zero_()
                layer.lora_B[slot].zero_()
                layer.lora_A[slot, :r_a].copy_(a_a)
                layer.lora_A[slot, r_a : r_a + r_b].copy_(a_b)
                layer.lora_B[slot, :, :r_a].copy_((1.0 - alpha) * s_a * b_a)
                layer.lora_B[slot, :, r_a : r_a + r_b].copy_(alpha * s_b * b_b)
        for path, heads in zip(batched.head_paths, batched.slot_heads()):
            head_a = model_a.get_submodule("base_model.model." + path).modules_to_save[ADAPTER_NAME].state_dict()
            head_b = model_b.get_submodule("base_model.model." + path).modules_to_save[ADAPTER_NAME].state_dict()
            for slot, alpha in enumerate(alphas):
                heads.slots[slot].load_state_dict(
                    {name: torch.lerp(head_a[name].float(), head_b[name].float(), alpha) for name in head_a}
                )
    return batched
