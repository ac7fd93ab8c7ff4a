"""Task metrics of DESIGN §6: accuracy, macro-F1, exact match and the majority-class floor.

All functions are pure: they take predictions and references already collected by the caller
(Python sequences, NumPy arrays or tensors) and return plain floats or a :class:`TaskScore`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from typing import TypeAlias

import numpy as np
import torch

from recycling_core.reports import TaskScore

Labels: TypeAlias = Sequence[Hashable] | torch.Tensor | np.ndarray
"""Class ids (or any hashable labels) as a sequence, a NumPy array or a tensor."""


def as_label_list(values: Labels, name: str = "values") -> list[Hashable]:
    """Return ``values`` as a flat Python list of hashable labels.

    Args:
        values: a sequence, a 1-D NumPy array or a 1-D tensor of labels.
        name: how to call the argument in error messages.

    Raises:
        ValueError: when ``values`` is a tensor or array with more than one dimension.
    """
    if isinstance(values, (torch.Tensor, np.ndarray)):
        if values.ndim > 1:
            raise ValueError(f"{name} must be one-dimensional, got shape {tuple(values.shape)}")
        converted = values.tolist()
        return list(converted) if isinstance(converted, list) else [converted]
    return list(values)


def _paired(preds: Labels, labels: Labels) -> tuple[list[Hashable], list[Hashable]]:
    pred_list = as_label_list(preds, "preds")
    label_list = as_label_list(labels, "labels")
    if len(pred_list) != len(label_list):
        raise ValueError(
            f"preds and labels differ in length: {len(pred_list)} != {len(label_list)}"
        )
    if not label_list:
        raise ValueError("cannot score an empty evaluation set")
    return pred_list, label_list


def _check_range(values: list[Hashable], num_labels: int, name: str) -> None:
    for value in values:
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < num_labels:
            raise ValueError(f"{name} holds {value!r}, outside the label ids 0..{num_labels - 1}")


def accuracy(preds: Labels, labels: Labels) -> float:
    """Share of examples whose prediction equals the label.

    Args:
        preds: predicted labels, one per example.
        labels: reference labels, same length.

    Returns:
        A float in [0, 1].

    Raises:
        ValueError: on a length mismatch or an empty evaluation set.
    """
    pred_list, label_list = _paired(preds, labels)
    correct = sum(1 for p, y in zip(pred_list, label_list, strict=True) if p == y)
    return correct / len(label_list)


def macro_f1(preds: Labels, labels: Labels, num_labels: int | None = None) -> float:
    """Macro-averaged F1 over the labels that occur in ``labels`` or ``preds``.

    For each such label c: F1_c = 2·TP / (2·TP + FP + FN); the result is their unweighted mean.
    A label that is neither present in the references nor ever predicted is left out of the
    average (its F1 is undefined), so a small dev split missing a rare class is not penalised.

    Args:
        preds: predicted labels, one per example.
        labels: reference labels, same length.
        num_labels: when given, every label and prediction must be an int in
            ``0..num_labels-1`` (a guard against label-mapping bugs).

    Returns:
        A float in [0, 1].

    Raises:
        ValueError: on a length mismatch, an empty set or an out-of-range label.
    """
    pred_list, label_list = _paired(preds, labels)
    if num_labels is not None:
        if num_labels < 1:
            raise ValueError(f"num_labels must be at least 1, got {num_labels}")
        _check_range(label_list, num_labels, "labels")
        _check_range(pred_list, num_labels, "preds")
    true_pos: Counter[Hashable] = Counter()
    false_pos: Counter[Hashable] = Counter()
    false_neg: Counter[Hashable] = Counter()
    for p, y in zip(pred_list, label_list, strict=True):
        if p == y:
            true_pos[y] += 1
        else:
            false_pos[p] += 1
            false_neg[y] += 1
    classes = set(label_list) | set(pred_list)
    scores = [2 * true_pos[c] / (2 * true_pos[c] + false_pos[c] + false_neg[c]) for c in classes]
    return sum(scores) / len(scores)


def majority_floor(labels: Labels) -> float:
    """Accuracy of always predicting the most frequent label: the floor of DESIGN §6.

    Raises:
        ValueError: on an empty label list.
    """
    label_list = as_label_list(labels, "labels")
    if not label_list:
        raise ValueError("cannot compute the floor of an empty evaluation set")
    return max(Counter(label_list).values()) / len(label_list)


def normalize_text(text: str) -> str:
    """The normalisation used by :func:`exact_match`: strip surrounding whitespace, casefold."""
    return text.strip().casefold()


def exact_match(predicted_texts: Sequence[str], reference_texts: Sequence[str]) -> float:
    """Share of predictions equal to their reference after strip + casefold.

    Raises:
        ValueError: on a length mismatch or an empty evaluation set.
    """
    if len(predicted_texts) != len(reference_texts):
        raise ValueError(
            "predicted_texts and reference_texts differ in length: "
            f"{len(predicted_texts)} != {len(reference_texts)}"
        )
    if not reference_texts:
        raise ValueError("cannot score an empty evaluation set")
    hits = sum(
        1
        for p, r in zip(predicted_texts, reference_texts, strict=True)
        if normalize_text(p) == normalize_text(r)
    )
    return hits / len(reference_texts)


def task_score(
    split: str,
    loss: float,
    preds: Labels | None = None,
    labels: Labels | None = None,
    num_labels: int | None = None,
    predicted_texts: Sequence[str] | None = None,
    reference_texts: Sequence[str] | None = None,
    floor: float | None = None,
) -> TaskScore:
    """Build the :class:`TaskScore` of one split.

    Classification: pass ``preds`` and ``labels`` (accuracy, macro-F1 and the majority-class
    floor are filled in). Generation: pass ``predicted_texts`` and ``reference_texts`` (exact
    match). Both pairs may be given. ``floor`` overrides the computed floor (e.g. the floor of
    the test split when scoring a subsample); for generation it stays None unless given.

    Args:
        split: split name, e.g. ``"dev"`` or ``"test"``.
        loss: mean loss on the split.
        preds: predicted class ids.
        labels: reference class ids.
        num_labels: optional range check for ``macro_f1``.
        predicted_texts: generated texts.
        reference_texts: reference texts.
        floor: explicit floor value.

    Returns:
        The filled :class:`TaskScore`; ``n`` is the number of examples scored.

    Raises:
        ValueError: when only one of a pair is given, when neither pair is given, or when the
            two pairs cover different numbers of examples.
    """
    if (preds is None) != (labels is None):
        raise ValueError("preds and labels must be given together")
    if (predicted_texts is None) != (reference_texts is None):
        raise ValueError("predicted_texts and reference_texts must be given together")
    if preds is None and predicted_texts is None:
        raise ValueError("task_score needs preds/labels or predicted_texts/reference_texts")

    n: int | None = None
    acc: float | None = None
    f1: float | None = None
    em: float | None = None
    if preds is not None and labels is not None:
        label_list = as_label_list(labels, "labels")
        acc = accuracy(preds, label_list)
        f1 = macro_f1(preds, label_list, num_labels)
        if floor is None:
            floor = majority_floor(label_list)
        n = len(label_list)
    if predicted_texts is not None and reference_texts is not None:
        em = exact_match(predicted_texts, reference_texts)
        if n is not None and n != len(reference_texts):
            raise ValueError(
                f"labels cover {n} examples but reference_texts cover {len(reference_texts)}"
            )
        n = len(reference_texts)
    assert n is not None
    return TaskScore(
        split=split,
        n=n,
        loss=float(loss),
        accuracy=acc,
        macro_f1=f1,
        exact_match=em,
        floor=None if floor is None else float(floor),
    )
