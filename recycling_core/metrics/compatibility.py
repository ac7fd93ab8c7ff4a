"""Compatibility of an outdated adapter A0 on the upgraded model M1 (DESIGN §6).

The caller evaluates M0+A0 (``source``) and M1+A0 (``direct``) on the same eval split and passes
both prediction lists with the references; this module turns them into
:class:`CompatibilityMetrics`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

from recycling_core.metrics.classification import (
    Labels,
    accuracy,
    as_label_list,
    macro_f1,
    normalize_text,
)
from recycling_core.reports import CompatibilityMetrics

SUPPORTED_METRICS: tuple[str, ...] = ("accuracy", "macro_f1", "exact_match")


def _metric(
    metric_name: str, preds: list[Hashable], labels: list[Hashable], num_labels: int | None
) -> float:
    if metric_name == "macro_f1":
        return macro_f1(preds, labels, num_labels)
    return accuracy(preds, labels)


def compatibility_metrics(
    labels: Labels | Sequence[str],
    source_preds: Labels | Sequence[str],
    direct_preds: Labels | Sequence[str],
    metric_name: str = "accuracy",
    split: str = "test",
    num_labels: int | None = None,
    fresh_score: float | None = None,
) -> CompatibilityMetrics:
    """Compute every compatibility field of DESIGN §6 from per-example predictions.

    Definitions (n = number of eval examples):

    - ``source`` = metric(M0+A0), ``direct`` = metric(M1+A0);
    - ``retention`` = direct / source (0.0 when source is 0);
    - ``negative_flip_rate`` = #{source right and direct wrong} / n;
    - ``agreement`` = #{source prediction == direct prediction} / n;
    - ``floor`` = the metric of a constant majority-class predictor on ``labels``. For
      ``accuracy`` and ``exact_match`` this is the majority-class accuracy of §6; for
      ``macro_f1`` it is that predictor's macro-F1, so that floor, source, direct and fresh
      share one unit and ``recovery`` stays meaningful;
    - ``recovery`` = (direct − floor) / (fresh − floor) when ``fresh_score`` is given,
      None when fresh equals the floor (undefined).

    Args:
        labels: reference labels of the eval split.
        source_preds: predictions of M0+A0, one per example.
        direct_preds: predictions of M1+A0, one per example.
        metric_name: ``"accuracy"``, ``"macro_f1"`` (class ids) or ``"exact_match"``
            (texts; compared after strip + casefold, also for flips and agreement).
        split: name of the eval split, recorded in the result.
        num_labels: optional range check of class ids (see :func:`macro_f1`).
        fresh_score: the same metric of a fresh adapter tuned on M1, when one exists.

    Returns:
        The filled :class:`CompatibilityMetrics`.

    Raises:
        ValueError: on an unknown metric, an empty split or prediction lists whose length
            differs from ``labels``.
    """
    if metric_name not in SUPPORTED_METRICS:
        raise ValueError(f"unknown metric {metric_name!r}; expected one of {SUPPORTED_METRICS}")
    ref = as_label_list(labels, "labels")
    src = as_label_list(source_preds, "source_preds")
    dst = as_label_list(direct_preds, "direct_preds")
    if not ref:
        raise ValueError("cannot score an empty evaluation set")
    for name, values in (("source_preds", src), ("direct_preds", dst)):
        if len(values) != len(ref):
            raise ValueError(f"{name} has {len(values)} entries but labels has {len(ref)}")
    if metric_name == "exact_match":
        ref = [normalize_text(str(v)) for v in ref]
        src = [normalize_text(str(v)) for v in src]
        dst = [normalize_text(str(v)) for v in dst]

    n = len(ref)
    source = _metric(metric_name, src, ref, num_labels)
    direct = _metric(metric_name, dst, ref, num_labels)
    retention = direct / source if source != 0 else 0.0
    negative_flips = sum(1 for s, d, y in zip(src, dst, ref, strict=True) if s == y and d != y)
    agreement = sum(1 for s, d in zip(src, dst, strict=True) if s == d) / n

    majority_label = Counter(ref).most_common(1)[0][0]
    floor = _metric(metric_name, [majority_label] * n, ref, None)

    recovery: float | None = None
    fresh: float | None = None
    if fresh_score is not None:
        fresh = float(fresh_score)
        recovery = None if fresh == floor else (direct - floor) / (fresh - floor)

    return CompatibilityMetrics(
        metric_name=metric_name,
        split=split,
        source=source,
        direct=direct,
        retention=retention,
        negative_flip_rate=negative_flips / n,
        agreement=agreement,
        floor=floor,
        recovery=recovery,
        fresh=fresh,
    )
