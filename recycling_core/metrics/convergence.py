"""Convergence speed of a tuning run (DESIGN §6): steps to a target dev metric and speedup."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from recycling_core.reports import ConvergenceMetrics, EvalPoint

TargetSource = Literal["fresh", "source", "given"]
DEFAULT_TARGET_FRACTION = 0.99


def _as_pairs(points: Sequence[EvalPoint] | Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    pairs: list[tuple[int, float]] = []
    for point in points:
        if isinstance(point, EvalPoint):
            pairs.append((point.step, point.metric))
        else:
            step, metric = point
            pairs.append((int(step), float(metric)))
    return sorted(pairs, key=lambda pair: pair[0])


def steps_to_target(
    points: Sequence[EvalPoint] | Sequence[tuple[int, float]], target: float
) -> int | None:
    """First evaluation step whose dev metric is at least ``target``.

    Args:
        points: evaluation points as :class:`EvalPoint` or ``(step, metric)`` tuples; they are
            considered in step order whatever order they come in.
        target: the metric to reach (inclusive).

    Returns:
        The step, or None when no evaluation reached the target.
    """
    for step, metric in _as_pairs(points):
        if metric >= target:
            return step
    return None


def default_target(
    fresh_best: float | None = None,
    source: float | None = None,
    fraction: float = DEFAULT_TARGET_FRACTION,
) -> tuple[float, Literal["fresh", "source"]]:
    """The default convergence target: ``fraction`` of the fresh baseline's best dev metric,
    else of the outdated adapter's ``source`` score.

    Args:
        fresh_best: best dev metric of the fresh baseline run, if one exists.
        source: metric of M0+A0, used when there is no fresh baseline.
        fraction: share of the reference to reach, in (0, 1]; default 0.99.

    Returns:
        ``(target, "fresh")`` or ``(target, "source")``.

    Raises:
        ValueError: when both references are None or ``fraction`` is outside (0, 1].
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if fresh_best is not None:
        return fraction * float(fresh_best), "fresh"
    if source is not None:
        return fraction * float(source), "source"
    raise ValueError("a default target needs the fresh baseline's best metric or the source score")


def convergence_metrics(
    points: Sequence[EvalPoint] | Sequence[tuple[int, float]],
    target: float,
    target_source: TargetSource,
    fresh_steps_to_target: int | None = None,
) -> ConvergenceMetrics:
    """Build :class:`ConvergenceMetrics` for one run.

    ``speedup`` = fresh_steps_to_target / steps_to_target when both exist. It stays None
    when either run never reached the target, and also when this run reached it at step 0
    (evaluated before any update): the ratio is undefined there, and ``steps_to_target = 0``
    already says the run needed no tuning to reach the target.

    Args:
        points: this run's dev evaluations.
        target: the target metric (e.g. from :func:`default_target`).
        target_source: where the target came from: ``"fresh"``, ``"source"`` or ``"given"``.
        fresh_steps_to_target: the fresh baseline's steps to the same target, if known.
    """
    steps = steps_to_target(points, target)
    speedup: float | None = None
    if steps is not None and steps > 0 and fresh_steps_to_target is not None:
        speedup = fresh_steps_to_target / steps
    return ConvergenceMetrics(
        target=float(target),
        target_source=target_source,
        steps_to_target=steps,
        fresh_steps_to_target=fresh_steps_to_target,
        speedup=speedup,
    )
