"""Linear mode connectivity (DESIGN §6): interpolation grids, barriers and state-dict lerps.

The caller evaluates the interpolated model at each α of :func:`alphas` (building the weights
with :func:`lerp_state_dicts` or, for sweeps without reloading, :func:`lerp_into_`) and passes
the per-α losses and metrics to :func:`interpolation_metrics`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

import torch

from recycling_core.reports import InterpolationMetrics

CONNECTED_THRESHOLD = 0.02
"""Two endpoints are linearly connected when the accuracy barrier is at most this value."""

DEFAULT_POINTS = 11
_ENDPOINT_TOLERANCE = 1e-9


def alphas(points: int = DEFAULT_POINTS) -> list[float]:
    """Evenly spaced interpolation coefficients from 0 to 1 inclusive, rounded to 1e-9.

    Args:
        points: number of coefficients K (at least 2). The default 11 gives 0.0, 0.1, …, 1.0.

    Raises:
        ValueError: when ``points`` < 2.
    """
    if points < 2:
        raise ValueError(f"an interpolation needs at least 2 points, got {points}")
    return [round(i / (points - 1), 9) for i in range(points)]


def _curve_with_endpoints(
    alpha_values: Sequence[float], values: Sequence[float], name: str
) -> tuple[list[tuple[float, float]], float, float]:
    """Validate a curve and return its (α, value) points and the values at α=0 and α=1."""
    a_list = [float(a) for a in alpha_values]
    v_list = [float(v) for v in values]
    if len(a_list) != len(v_list):
        raise ValueError(f"{len(a_list)} alphas but {len(v_list)} {name}")
    if len(a_list) < 2:
        raise ValueError("a barrier needs at least the two endpoints α=0 and α=1")
    for a in a_list:
        if not -_ENDPOINT_TOLERANCE <= a <= 1 + _ENDPOINT_TOLERANCE:
            raise ValueError(f"alpha {a} lies outside [0, 1]")
    points = list(zip(a_list, v_list, strict=True))
    try:
        start = next(v for a, v in points if abs(a) <= _ENDPOINT_TOLERANCE)
        end = next(v for a, v in points if abs(a - 1) <= _ENDPOINT_TOLERANCE)
    except StopIteration:
        raise ValueError("alphas must include both endpoints 0 and 1") from None
    return points, start, end


def _max_or_nan(gaps: list[float]) -> float:
    # Python's max() is order dependent with NaN; a NaN anywhere makes the barrier NaN.
    if any(math.isnan(g) for g in gaps):
        return math.nan
    return max(gaps)


def loss_barrier(alphas: Sequence[float], losses: Sequence[float]) -> float:
    """Loss barrier max_α [L(α) − ((1−α)·L(0) + α·L(1))].

    The endpoints contribute 0, so the barrier is never negative; a convex loss curve gives 0.

    Args:
        alphas: interpolation coefficients; must contain 0 and 1.
        losses: loss at each coefficient.

    Returns:
        The barrier (NaN if any loss is NaN, inf if a loss is inf).

    Raises:
        ValueError: on a length mismatch, a coefficient outside [0, 1] or missing endpoints.
    """
    points, start, end = _curve_with_endpoints(alphas, losses, "losses")
    return _max_or_nan([v - ((1 - a) * start + a * end) for a, v in points])


def accuracy_barrier(alphas: Sequence[float], metrics: Sequence[float]) -> float:
    """Accuracy barrier max_α [((1−α)·acc(0) + α·acc(1)) − acc(α)].

    Works for any higher-is-better metric; never negative (the endpoints contribute 0).

    Args:
        alphas: interpolation coefficients; must contain 0 and 1.
        metrics: metric at each coefficient.

    Raises:
        ValueError: on a length mismatch, a coefficient outside [0, 1] or missing endpoints.
    """
    points, start, end = _curve_with_endpoints(alphas, metrics, "metrics")
    return _max_or_nan([((1 - a) * start + a * end) - v for a, v in points])


def interpolation_metrics(
    mode: Literal["model", "adapter"],
    split: str,
    alphas: Sequence[float],
    losses: Sequence[float],
    metrics: Sequence[float],
    metric_name: str,
) -> InterpolationMetrics:
    """Assemble :class:`InterpolationMetrics` with both barriers and the ``connected`` flag.

    Args:
        mode: ``"model"`` (whole merged parameters) or ``"adapter"`` (ΔW lerp on M1).
        split: evaluation split.
        alphas: interpolation coefficients (including 0 and 1).
        losses: loss at each α.
        metrics: task metric at each α.
        metric_name: name of the task metric.

    Returns:
        The metrics; ``connected`` is ``accuracy_barrier <= CONNECTED_THRESHOLD``.
    """
    lb = loss_barrier(alphas, losses)
    ab = accuracy_barrier(alphas, metrics)
    return InterpolationMetrics(
        mode=mode,
        split=split,
        alphas=[float(a) for a in alphas],
        losses=[float(v) for v in losses],
        metrics=[float(v) for v in metrics],
        metric_name=metric_name,
        loss_barrier=lb,
        accuracy_barrier=ab,
        connected=bool(ab <= CONNECTED_THRESHOLD),
    )


def _check_same_keys(
    first: Mapping[str, torch.Tensor],
    second: Mapping[str, torch.Tensor],
    first_name: str,
    second_name: str,
) -> None:
    only_first = sorted(set(first) - set(second))
    if only_first:
        raise ValueError(f"key {only_first[0]!r} is in {first_name} but not in {second_name}")
    only_second = sorted(set(second) - set(first))
    if only_second:
        raise ValueError(f"key {only_second[0]!r} is in {second_name} but not in {first_name}")


def _check_pair(key: str, a: torch.Tensor, b: torch.Tensor) -> None:
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch at {key!r}: {tuple(a.shape)} vs {tuple(b.shape)}")
    if a.is_floating_point() != b.is_floating_point():
        raise ValueError(f"dtype mismatch at {key!r}: {a.dtype} vs {b.dtype}")
    if not a.is_floating_point():
        if a.dtype != b.dtype or not torch.equal(a, b.to(a.device)):
            raise ValueError(
                f"non-float tensor {key!r} differs between the endpoints and cannot be interpolated"
            )


def lerp_state_dicts(
    sd_a: Mapping[str, torch.Tensor], sd_b: Mapping[str, torch.Tensor], alpha: float
) -> dict[str, torch.Tensor]:
    """Return the state dict θ(α) = (1−α)·θ_a + α·θ_b as new tensors.

    Floating tensors are interpolated with :func:`torch.lerp` in the dtype and on the device of
    ``sd_a`` (α = 0 reproduces ``sd_a`` and α = 1 reproduces ``sd_b`` exactly). Non-float
    tensors (integer buffers such as ``position_ids``) must be equal in both and are copied
    from ``sd_b``.

    Args:
        sd_a: endpoint at α = 0.
        sd_b: endpoint at α = 1, with exactly the same keys and shapes.
        alpha: interpolation coefficient, normally in [0, 1].

    Raises:
        ValueError: naming the first key present in one dict only, a shape mismatch, or a
            non-float tensor that differs between the endpoints.
    """
    if not math.isfinite(alpha):
        raise ValueError(f"alpha must be finite, got {alpha}")
    _check_same_keys(sd_a, sd_b, "sd_a", "sd_b")
    result: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for key, a in sd_a.items():
            b = sd_b[key]
            _check_pair(key, a, b)
            if a.is_floating_point():
                result[key] = torch.lerp(a.detach(), b.detach().to(a.device, a.dtype), alpha)
            else:
                result[key] = b.detach().clone()
    return result


def lerp_into_(
    module_params: Mapping[str, torch.Tensor],
    sd_a: Mapping[str, torch.Tensor],
    sd_b: Mapping[str, torch.Tensor],
    alpha: float,
    *,
    strict: bool = True,
) -> None:
    """Write θ(α) = (1−α)·θ_a + α·θ_b in place into existing tensors.

    Meant for sweeps over α without reloading a model: pass e.g. ``dict(model.named_parameters())``
    or ``model.state_dict()`` as ``module_params`` and keep the two endpoints elsewhere (CPU is
    fine). Each target is written with ``torch.lerp(..., out=target)``; the only allocations are
    temporaries when an endpoint lives on another device or in another dtype than the target.

    Args:
        module_params: name → tensor to overwrite (parameters or buffers of the live model).
        sd_a: endpoint at α = 0.
        sd_b: endpoint at α = 1.
        alpha: interpolation coefficient.
        strict: when True (default) the three mappings must have exactly the same keys; when
            False, keys of the endpoints that ``module_params`` lacks are ignored (e.g. a tied
            ``lm_head.weight`` absent from ``named_parameters()``). Every key of
            ``module_params`` must be in both endpoints either way.

    Raises:
        ValueError: naming a missing key, a shape mismatch, a differing non-float tensor, or a
            target that shares memory with an endpoint (the sweep would corrupt the endpoint).
    """
    if not math.isfinite(alpha):
        raise ValueError(f"alpha must be finite, got {alpha}")
    _check_same_keys(sd_a, sd_b, "sd_a", "sd_b")
    if strict:
        _check_same_keys(module_params, sd_a, "module_params", "the endpoint state dicts")
    else:
        missing = sorted(set(module_params) - set(sd_a))
        if missing:
            raise ValueError(f"key {missing[0]!r} of module_params is not in the endpoints")
    with torch.no_grad():
        for key, target in module_params.items():
            a, b = sd_a[key], sd_b[key]
            _check_pair(key, a, b)
            if target.shape != a.shape:
                raise ValueError(
                    f"shape mismatch at {key!r}: target {tuple(target.shape)} vs endpoint "
                    f"{tuple(a.shape)}"
                )
            if target.is_floating_point() != a.is_floating_point():
                raise ValueError(f"dtype mismatch at {key!r}: target {target.dtype} vs {a.dtype}")
            if target.data_ptr() in (a.data_ptr(), b.data_ptr()) and target.numel() > 0:
                raise ValueError(f"target {key!r} shares memory with an endpoint tensor")
            if target.is_floating_point():
                a_t = a.detach().to(target.device, target.dtype)
                b_t = b.detach().to(target.device, target.dtype)
                torch.lerp(a_t, b_t, alpha, out=target.detach())
            else:
                target.copy_(b)
