"""Unit tests of recycling_core.metrics: every value is checked against hand arithmetic."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch

from recycling_core.metrics import (
    CONNECTED_THRESHOLD,
    AttentionSimilarityAccumulator,
    CostMeter,
    accuracy,
    accuracy_barrier,
    alphas,
    attention_map_similarity,
    compatibility_metrics,
    convergence_metrics,
    default_target,
    exact_match,
    hardware_info,
    interpolation_metrics,
    lerp_into_,
    lerp_state_dicts,
    library_versions,
    loss_barrier,
    macro_f1,
    majority_floor,
    mismatched_head_similarity,
    module_group,
    module_groups,
    similarity_metrics,
    steps_to_target,
    task_score,
    weight_distance,
)
from recycling_core.reports import EvalPoint, Report

# ----------------------------------------------------------------------------- classification

LABELS = [0, 0, 0, 1, 1, 2]
PREDS = [0, 0, 1, 1, 2, 2]
# correct: ✓ ✓ ✗ ✓ ✗ ✓ → accuracy 4/6
# class 0: TP 2, FP 0, FN 1 → F1 = 4/5
# class 1: TP 1, FP 1 (#2), FN 1 (#4) → F1 = 2/4
# class 2: TP 1, FP 1 (#4), FN 0 → F1 = 2/3
# macro-F1 = (4/5 + 1/2 + 2/3) / 3 = (24 + 15 + 20) / 90 = 59/90
MACRO_F1 = 59 / 90


def test_accuracy_and_macro_f1_on_six_examples() -> None:
    assert accuracy(PREDS, LABELS) == pytest.approx(4 / 6)
    assert macro_f1(PREDS, LABELS) == pytest.approx(MACRO_F1)
    # label 3 of a 4-label task is never present nor predicted: excluded, same value
    assert macro_f1(PREDS, LABELS, num_labels=4) == pytest.approx(MACRO_F1)
    # tensors and arrays give the same numbers
    assert accuracy(torch.tensor(PREDS), np.array(LABELS)) == pytest.approx(4 / 6)


def test_macro_f1_counts_a_label_that_is_only_predicted() -> None:
    # class 0: TP 1, FN 1 → 2/3; class 1 (only predicted): TP 0, FP 1 → 0; mean = 1/3
    assert macro_f1([0, 1], [0, 0]) == pytest.approx(1 / 3)


def test_classification_input_errors() -> None:
    with pytest.raises(ValueError, match="length"):
        accuracy([0, 1], [0])
    with pytest.raises(ValueError, match="empty"):
        accuracy([], [])
    with pytest.raises(ValueError, match="outside"):
        macro_f1([0, 3], [0, 1], num_labels=3)


def test_majority_floor_and_exact_match() -> None:
    # class 0 holds 3 of 6 labels → 0.5
    assert majority_floor(LABELS) == pytest.approx(0.5)
    # " Paris " = "paris" and "berlin" = "Berlin" after strip+casefold, "Rome" ≠ "Madrid" → 2/3
    assert exact_match([" Paris ", "berlin", "Rome"], ["paris", "Berlin", "Madrid"]) == (
        pytest.approx(2 / 3)
    )
    # casefold (not lower): "Straße" → "strasse"
    assert exact_match(["Straße"], ["STRASSE"]) == 1.0


def test_task_score_classification_and_generation() -> None:
    score = task_score("test", 0.7, preds=PREDS, labels=LABELS, num_labels=3)
    assert score.split == "test" and score.n == 6 and score.loss == pytest.approx(0.7)
    assert score.accuracy == pytest.approx(4 / 6)
    assert score.macro_f1 == pytest.approx(MACRO_F1)
    assert score.floor == pytest.approx(0.5)
    assert score.exact_match is None
    assert score.primary == pytest.approx(4 / 6)

    gen = task_score("dev", 1.25, predicted_texts=["a", "B "], reference_texts=["a", "c"])
    # 1 of 2 matches; no floor for generation unless given
    assert gen.n == 2 and gen.exact_match == pytest.approx(0.5) and gen.floor is None
    assert gen.accuracy is None and gen.primary == pytest.approx(0.5)

    with pytest.raises(ValueError, match="together"):
        task_score("test", 0.1, preds=PREDS)
    with pytest.raises(ValueError, match="needs"):
        task_score("test", 0.1)


# ----------------------------------------------------------------------------- compatibility


def test_compatibility_fields_by_hand() -> None:
    labels = [0, 0, 0, 1, 1, 2]
    source = [0, 0, 0, 1, 1, 0]  # wrong only at #5 → 5/6
    direct = [0, 0, 1, 1, 2, 2]  # wrong at #2, #4 → 4/6
    result = compatibility_metrics(labels, source, direct, fresh_score=0.9)
    assert result.metric_name == "accuracy" and result.split == "test"
    assert result.source == pytest.approx(5 / 6)
    assert result.direct == pytest.approx(4 / 6)
    # retention = (4/6) / (5/6) = 0.8
    assert result.retention == pytest.approx(0.8)
    # source right & direct wrong: #2, #4 → 2/6 (#5 is a positive flip, not counted)
    assert result.negative_flip_rate == pytest.approx(2 / 6)
    # equal predictions: #0, #1, #3 → 3/6
    assert result.agreement == pytest.approx(0.5)
    # majority class 0: 3/6
    assert result.floor == pytest.approx(0.5)
    # recovery = (4/6 − 1/2) / (0.9 − 0.5) = (1/6) / 0.4 = 5/12
    assert result.recovery == pytest.approx(5 / 12)
    assert result.fresh == pytest.approx(0.9)


def test_compatibility_edge_cases() -> None:
    # no fresh run → no recovery
    assert compatibility_metrics([0, 1], [0, 1], [0, 0]).recovery is None
    # fresh equal to the floor (1/2) → recovery undefined
    assert compatibility_metrics([0, 1], [0, 1], [0, 0], fresh_score=0.5).recovery is None
    # source 0 → retention 0
    zero = compatibility_metrics([0, 1], [1, 0], [0, 1])
    assert zero.source == 0.0 and zero.direct == 1.0 and zero.retention == 0.0
    with pytest.raises(ValueError, match="direct_preds"):
        compatibility_metrics([0, 1], [0, 1], [0])
    with pytest.raises(ValueError, match="unknown metric"):
        compatibility_metrics([0, 1], [0, 1], [0, 1], metric_name="bleu")


def test_compatibility_macro_f1_floor_is_in_metric_units() -> None:
    # constant prediction 0 on [0,0,0,1,1,2]: class 0 TP 3 FP 3 → 6/9; classes 1, 2 → 0
    # floor = (2/3 + 0 + 0) / 3 = 2/9
    result = compatibility_metrics(LABELS, LABELS, PREDS, metric_name="macro_f1")
    assert result.source == pytest.approx(1.0)
    assert result.direct == pytest.approx(MACRO_F1)
    assert result.floor == pytest.approx(2 / 9)


def test_compatibility_exact_match_normalises_texts() -> None:
    labels = ["Yes", "no", "yes"]  # → yes, no, yes
    source = [" yes", "No", "no"]  # → yes, no, no: right at #0, #1 → 2/3
    direct = ["yes", "yes", "YES"]  # → yes, yes, yes: right at #0, #2 → 2/3
    result = compatibility_metrics(labels, source, direct, metric_name="exact_match")
    assert result.source == pytest.approx(2 / 3) and result.direct == pytest.approx(2 / 3)
    assert result.negative_flip_rate == pytest.approx(1 / 3)  # #1
    assert result.agreement == pytest.approx(1 / 3)  # #0 only
    assert result.floor == pytest.approx(2 / 3)  # "yes" twice of 3


# ----------------------------------------------------------------------------- interpolation


def test_alphas() -> None:
    assert alphas() == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    assert alphas(3) == [0.0, 0.5, 1.0]
    assert alphas(4) == [0.0, 0.333333333, 0.666666667, 1.0]
    with pytest.raises(ValueError):
        alphas(1)


def test_loss_barrier_three_points() -> None:
    # line at α=0.5: (1.0 + 0.5)/2 = 0.75; L(0.5) = 2.0 → barrier 1.25
    assert loss_barrier([0.0, 0.5, 1.0], [1.0, 2.0, 0.5]) == pytest.approx(1.25)


def test_convex_loss_curve_has_zero_barrier() -> None:
    # line 1 − 0.4α: 0.9, 0.8, 0.7 at α = .25, .5, .75; losses 0.6, 0.4, 0.45 lie below → 0
    assert loss_barrier([0, 0.25, 0.5, 0.75, 1], [1.0, 0.6, 0.4, 0.45, 0.6]) == 0.0


def test_accuracy_barrier_five_points() -> None:
    grid = [0.0, 0.25, 0.5, 0.75, 1.0]
    # line 0.8 + 0.1α: 0.825, 0.85, 0.875; dips 0.125, 0.35, 0.125 → 0.35
    assert accuracy_barrier(grid, [0.8, 0.7, 0.5, 0.75, 0.9]) == pytest.approx(0.35)
    # all above the line (gaps −0.025, −0.03, −0.025) → 0
    assert accuracy_barrier(grid, [0.8, 0.85, 0.88, 0.9, 0.9]) == 0.0


def test_interpolation_metrics_connected_flag() -> None:
    grid = [0.0, 0.5, 1.0]
    # flat line at 0.5; dip 2^-6 = 0.015625 ≤ 0.02 → connected
    small = interpolation_metrics(
        "model", "dev", grid, [1.0, 1.0, 1.0], [0.5, 0.484375, 0.5], "accuracy"
    )
    assert small.accuracy_barrier == pytest.approx(0.015625) and small.connected
    assert small.loss_barrier == 0.0
    # dip 2^-5 = 0.03125 > 0.02 → not connected
    big = interpolation_metrics(
        "adapter", "dev", grid, [1.0, 3.0, 1.0], [0.5, 0.46875, 0.5], "accuracy"
    )
    assert big.accuracy_barrier == pytest.approx(0.03125) and not big.connected
    assert big.loss_barrier == pytest.approx(2.0)  # 3.0 − 1.0
    assert CONNECTED_THRESHOLD == 0.02


def test_barrier_needs_endpoints() -> None:
    with pytest.raises(ValueError, match="endpoints"):
        loss_barrier([0.0, 0.5], [1.0, 2.0])
    with pytest.raises(ValueError):
        loss_barrier([0.0, 1.0], [1.0])


def _endpoints() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    sd_a = {
        "w": torch.tensor([[0.0, 2.0], [4.0, 6.0]]),
        "b": torch.tensor([1.0, 1.0]),
        "position_ids": torch.arange(3),
    }
    sd_b = {
        "w": torch.tensor([[2.0, 2.0], [0.0, 10.0]]),
        "b": torch.tensor([3.0, -1.0]),
        "position_ids": torch.arange(3),
    }
    return sd_a, sd_b


def test_lerp_state_dicts() -> None:
    sd_a, sd_b = _endpoints()
    start = lerp_state_dicts(sd_a, sd_b, 0.0)
    assert torch.equal(start["w"], sd_a["w"]) and torch.equal(start["b"], sd_a["b"])
    end = lerp_state_dicts(sd_a, sd_b, 1.0)
    assert torch.equal(end["w"], sd_b["w"]) and torch.equal(end["b"], sd_b["b"])
    mid = lerp_state_dicts(sd_a, sd_b, 0.5)
    # (a + b)/2: w = [[1, 2], [2, 8]], b = [2, 0]
    assert torch.equal(mid["w"], torch.tensor([[1.0, 2.0], [2.0, 8.0]]))
    assert torch.equal(mid["b"], torch.tensor([2.0, 0.0]))
    # integer buffer copied from sd_b, not aliased
    assert torch.equal(mid["position_ids"], torch.arange(3))
    assert mid["position_ids"].data_ptr() != sd_b["position_ids"].data_ptr()


def test_lerp_state_dicts_errors() -> None:
    sd_a, sd_b = _endpoints()
    del sd_b["b"]
    with pytest.raises(ValueError, match="'b'"):
        lerp_state_dicts(sd_a, sd_b, 0.5)
    sd_a, sd_b = _endpoints()
    sd_b["position_ids"] = torch.tensor([0, 2, 1])
    with pytest.raises(ValueError, match="position_ids"):
        lerp_state_dicts(sd_a, sd_b, 0.5)
    sd_a, sd_b = _endpoints()
    sd_b["w"] = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="shape mismatch at 'w'"):
        lerp_state_dicts(sd_a, sd_b, 0.5)


def test_lerp_into_writes_in_place() -> None:
    layer = torch.nn.Linear(2, 2)
    sd_a = {"weight": torch.tensor([[0.0, 2.0], [4.0, 6.0]]), "bias": torch.tensor([1.0, 1.0])}
    sd_b = {"weight": torch.tensor([[2.0, 2.0], [0.0, 10.0]]), "bias": torch.tensor([3.0, -1.0])}
    params = dict(layer.named_parameters())
    pointers = {name: p.data_ptr() for name, p in params.items()}
    lerp_into_(params, sd_a, sd_b, 0.25)
    # a + 0.25(b − a): w = [[0.5, 2], [3, 7]], b = [1.5, 0.5]
    assert torch.equal(layer.weight.detach(), torch.tensor([[0.5, 2.0], [3.0, 7.0]]))
    assert torch.equal(layer.bias.detach(), torch.tensor([1.5, 0.5]))
    assert {name: p.data_ptr() for name, p in params.items()} == pointers
    assert layer.weight.requires_grad
    lerp_into_(params, sd_a, sd_b, 1.0)
    assert torch.equal(layer.weight.detach(), sd_b["weight"])
    # a target that is an endpoint's memory would corrupt the sweep
    with pytest.raises(ValueError, match="shares memory"):
        lerp_into_(params, {k: v for k, v in params.items()}, sd_b, 0.5)
    with pytest.raises(ValueError, match="'bias'"):
        lerp_into_(params, {"weight": sd_a["weight"]}, {"weight": sd_b["weight"]}, 0.5)


# ----------------------------------------------------------------------------- similarity
# One layer, two heads, two real tokens; flattened maps:
#   A0 = (1,0,0,1)  A1 = (1,0,1,0)  B0 = (1,0,0,1)  B1 = (.5,.5,1,0)
# matched:  cos(A0,B0) = 1;  cos(A1,B1) = 1.5 / (√2·√1.5) = √3/2
# mismatched: cos(A0,B1) = 0.5 / (√2·√1.5) = 1/(2√3);  cos(A1,B0) = 1 / (√2·√2) = 1/2
HEADS_A = [[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [1.0, 0.0]]]
HEADS_B = [[[1.0, 0.0], [0.0, 1.0]], [[0.5, 0.5], [1.0, 0.0]]]
MATCHED = [1.0, math.sqrt(3) / 2]
CHANCE = (1 / (2 * math.sqrt(3)) + 0.5) / 2


def _padded(heads: list[list[list[float]]], left_pad: bool, fill: float) -> torch.Tensor:
    """[1, 2, 3, 3] map with the 2×2 real block and a padded row/column holding ``fill``."""
    out = torch.full((1, 2, 3, 3), fill)
    block = torch.tensor(heads)
    if left_pad:
        out[0, :, 1:, 1:] = block
    else:
        out[0, :, :2, :2] = block
    return out


def test_identical_maps_give_one() -> None:
    maps = [torch.softmax(torch.randn(2, 3, 4, 4), dim=-1) for _ in range(2)]
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    matrix = attention_map_similarity(maps, [m.clone() for m in maps], mask)
    assert matrix.shape == (2, 3)
    assert torch.allclose(matrix, torch.ones(2, 3, dtype=torch.float64), atol=1e-6)


def test_hand_made_maps_and_chance_level() -> None:
    mask = torch.tensor([[1, 1]])
    maps_a = [torch.tensor([HEADS_A])]
    maps_b = [torch.tensor([HEADS_B])]
    matrix = attention_map_similarity(maps_a, maps_b, mask)
    assert matrix.tolist()[0] == pytest.approx(MATCHED)
    assert mismatched_head_similarity(maps_a, maps_b, mask) == pytest.approx(CHANCE)
    metrics = similarity_metrics(maps_a, maps_b, mask)
    assert metrics.matrix[0] == pytest.approx(MATCHED)
    assert metrics.mean == pytest.approx((1 + math.sqrt(3) / 2) / 2)
    assert metrics.chance_level == pytest.approx(CHANCE)
    assert metrics.n_probes == 1


@pytest.mark.parametrize("left_pad", [False, True])
def test_padded_positions_are_ignored(left_pad: bool) -> None:
    mask = torch.tensor([[0, 1, 1]]) if left_pad else torch.tensor([[1, 1, 0]])
    reference = similarity_metrics(
        [_padded(HEADS_A, left_pad, 0.3)], [_padded(HEADS_B, left_pad, 0.3)], mask
    )
    changed = similarity_metrics(
        [_padded(HEADS_A, left_pad, 0.3)], [_padded(HEADS_B, left_pad, 7.0)], mask
    )
    assert reference.matrix[0] == pytest.approx(MATCHED)
    assert np.array(changed.matrix) == pytest.approx(np.array(reference.matrix))
    assert changed.chance_level == pytest.approx(CHANCE)


def test_orthogonal_maps_give_zero() -> None:
    # (1,0,1,0)·(0,1,0,1) = 0 in both heads
    a = torch.tensor([[[[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [0.0, 1.0]]]])
    b = torch.tensor([[[[0.0, 1.0], [0.0, 1.0]], [[1.0, 0.0], [1.0, 0.0]]]])
    matrix = attention_map_similarity([a], [b], torch.ones(1, 2))
    assert matrix.tolist() == [[0.0, 0.0]]
    # the mismatched pairs are the identical ones here → chance level 1
    assert mismatched_head_similarity([a], [b], torch.ones(1, 2)) == pytest.approx(1.0)


def test_accumulator_streams_batches_with_equal_example_weight() -> None:
    # example 0: A with itself (S=2) → matched (1, 1); mismatched cos(A0,A1) = 0.5 both ways
    # example 1: A vs B padded to S=3 → matched (1, √3/2); mismatched as CHANCE
    first_a = torch.tensor([HEADS_A])
    accumulator = AttentionSimilarityAccumulator()
    accumulator.add([first_a], [first_a.clone()], torch.ones(1, 2))
    accumulator.add(
        [_padded(HEADS_A, False, 0.3)], [_padded(HEADS_B, False, 9.0)], torch.tensor([[1, 1, 0]])
    )
    streamed = accumulator.result()
    expected_matrix = [1.0, (1 + math.sqrt(3) / 2) / 2]
    expected_chance = (0.5 + 0.5 + 1 / (2 * math.sqrt(3)) + 0.5) / 4
    assert streamed.n_probes == 2
    assert streamed.matrix[0] == pytest.approx(expected_matrix)
    assert streamed.chance_level == pytest.approx(expected_chance)
    # same as one batch padded to S=3
    both_a = torch.cat([_padded(HEADS_A, False, 0.0), _padded(HEADS_A, False, 0.3)])
    both_b = torch.cat([_padded(HEADS_A, False, 5.0), _padded(HEADS_B, False, 9.0)])
    single = similarity_metrics([both_a], [both_b], torch.tensor([[1, 1, 0], [1, 1, 0]]))
    assert np.array(single.matrix) == pytest.approx(np.array(streamed.matrix))
    assert single.chance_level == pytest.approx(streamed.chance_level)


def test_similarity_errors() -> None:
    maps = [torch.ones(1, 2, 2, 2)]
    with pytest.raises(ValueError, match="attention_mask"):
        similarity_metrics(maps, maps, torch.ones(1, 3))
    with pytest.raises(ValueError, match="real token"):
        similarity_metrics(maps, maps, torch.zeros(1, 2))
    with pytest.raises(ValueError, match="layers"):
        similarity_metrics(maps, maps + maps, torch.ones(1, 2))
    with pytest.raises(ValueError, match="no probe"):
        AttentionSimilarityAccumulator().result()


def test_single_head_chance_level_uses_other_layers() -> None:
    # layer 0 head (1,0,0,1), layer 1 head (1,0,1,0) in both models:
    # mismatched = cos(L0_A, L1_B) = cos(L1_A, L0_B) = 1/2
    layer0 = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]])
    layer1 = torch.tensor([[[[1.0, 0.0], [1.0, 0.0]]]])
    metrics = similarity_metrics([layer0, layer1], [layer0, layer1], torch.ones(1, 2))
    assert np.array(metrics.matrix) == pytest.approx(np.ones((2, 1)))
    assert metrics.chance_level == pytest.approx(0.5)


# ----------------------------------------------------------------------------- convergence

CURVE = [(0, 0.3), (10, 0.6), (20, 0.85), (30, 0.9), (40, 0.88)]


def test_steps_to_target() -> None:
    assert steps_to_target(CURVE, 0.85) == 20  # inclusive ≥
    assert steps_to_target(list(reversed(CURVE)), 0.86) == 30  # step order, not list order
    assert steps_to_target(CURVE, 0.95) is None
    points = [EvalPoint(step=s, metric=m, loss=1.0) for s, m in CURVE]
    assert steps_to_target(points, 0.6) == 10


def test_default_target() -> None:
    # 0.99 · 0.9 = 0.891
    target, origin = default_target(fresh_best=0.9, source=0.8)
    assert target == pytest.approx(0.891) and origin == "fresh"
    # no fresh run: 0.99 · 0.8 = 0.792
    target, origin = default_target(source=0.8)
    assert target == pytest.approx(0.792) and origin == "source"
    with pytest.raises(ValueError):
        default_target()


def test_convergence_metrics_speedup() -> None:
    # method reaches 0.85 at step 20; fresh needed 50 → speedup 50/20 = 2.5
    result = convergence_metrics(CURVE, 0.85, "fresh", fresh_steps_to_target=50)
    assert result.steps_to_target == 20 and result.speedup == pytest.approx(2.5)
    assert convergence_metrics(CURVE, 0.95, "given", fresh_steps_to_target=50).speedup is None
    assert convergence_metrics(CURVE, 0.85, "source").speedup is None
    # reached before any update: ratio undefined
    assert convergence_metrics(CURVE, 0.2, "fresh", fresh_steps_to_target=10).speedup is None


# ----------------------------------------------------------------------------- weight distance


def test_weight_distance_by_hand() -> None:
    state_a = {
        "embeddings.word_embeddings.weight": torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
        "encoder.layer.0.attention.weight": torch.tensor([3.0, 4.0]),
        "encoder.layer.0.attention.bias": torch.tensor([0.0]),
        "encoder.layer.1.output.weight": torch.tensor([2.0, 0.0]),
        "classifier.weight": torch.tensor([1.0]),  # resized in b → skipped
        "position_ids": torch.arange(2),  # not float → skipped
        "only_in_a.weight": torch.tensor([5.0]),  # not shared → skipped
    }
    state_b = {
        "embeddings.word_embeddings.weight": torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
        "encoder.layer.0.attention.weight": torch.tensor([3.0, 5.0]),
        "encoder.layer.0.attention.bias": torch.tensor([0.0]),
        "encoder.layer.1.output.weight": torch.tensor([0.0, 2.0]),
        "classifier.weight": torch.tensor([1.0, 2.0]),
        "position_ids": torch.arange(2),
    }
    # Σa² = 2 + 25 + 0 + 4 = 31;  Σb² = 2 + 34 + 0 + 4 = 40
    # Σ(b−a)² = 0 + 1 + 0 + 8 = 9;  Σab = 2 + 29 + 0 + 0 = 31
    result = weight_distance(state_a, state_b)
    assert result.relative_l2 == pytest.approx(math.sqrt(9 / 31))
    assert result.cosine == pytest.approx(31 / math.sqrt(31 * 40))
    # embeddings: 0; layer 0: √(1/25) = 0.2; layer 1: √(8/4) = √2
    assert result.per_module == pytest.approx(
        {"embeddings": 0.0, "encoder.layer.0": 0.2, "encoder.layer.1": math.sqrt(2)}
    )
    by_param = weight_distance(state_a, state_b, group_by="parameter").per_module
    assert by_param["encoder.layer.1.output.weight"] == pytest.approx(math.sqrt(2))
    assert "encoder.layer.0.attention.bias" not in by_param  # zero reference: undefined
    with pytest.raises(ValueError, match="share no"):
        weight_distance({"x": torch.ones(2)}, {"y": torch.ones(2)})


def test_weight_distance_counts_tied_tensors_once() -> None:
    tied_a, tied_b = torch.tensor([1.0, 0.0]), torch.tensor([2.0, 0.0])
    norm = torch.tensor([0.0, 1.0])
    state_a = {"wte.weight": tied_a, "lm_head.weight": tied_a, "ln.weight": norm}
    state_b = {"wte.weight": tied_b, "lm_head.weight": tied_b, "ln.weight": norm.clone()}
    # once: Σa² = 1 + 1 = 2, Σ(b−a)² = 1 → √(1/2)  (twice would give √(2/3))
    assert weight_distance(state_a, state_b).relative_l2 == pytest.approx(math.sqrt(0.5))


def test_module_group_names() -> None:
    llama = module_groups(
        [
            "model.embed_tokens.weight",
            "model.layers.11.self_attn.q_proj.weight",
            "model.norm.weight",
            "lm_head.weight",
        ]
    )
    assert list(llama.values()) == [
        "model.embed_tokens",
        "model.layers.11",
        "model.norm",
        "lm_head",
    ]
    bert = module_groups(
        [
            "bert.embeddings.LayerNorm.bias",
            "bert.encoder.layer.0.output.dense.weight",
            "bert.pooler.dense.weight",
            "classifier.weight",
        ]
    )
    assert list(bert.values()) == [
        "bert.embeddings",
        "bert.encoder.layer.0",
        "bert.pooler",
        "classifier",
    ]
    assert module_group("embeddings.word_embeddings.weight") == "embeddings"
    assert module_group("encoder.layer.3.attention.self.query.weight") == "encoder.layer.3"


# ----------------------------------------------------------------------------- cost


def test_cost_meter_counts_tokens_and_time() -> None:
    with CostMeter("cpu") as meter:
        meter.add_tokens(5)
        meter.add_tokens(7)
        time.sleep(0.01)
    cost = meter.cost
    assert cost is not None
    assert cost.tokens == 12
    assert cost.wall_seconds >= 0.01
    assert cost.device_seconds == 0.0  # no CUDA device in use
    assert cost.peak_memory_bytes > 0

    explicit = CostMeter()
    with pytest.raises(RuntimeError):
        explicit.add_tokens(1)
    explicit.start()
    explicit.add_tokens(3)
    assert explicit.stop().tokens == 3


def test_hardware_and_versions_fit_the_report() -> None:
    versions = library_versions()
    assert set(versions) == {
        "torch",
        "transformers",
        "peft",
        "safetensors",
        "numpy",
        "python",
        "recycling_core",
    }
    assert versions["torch"].startswith(torch.__version__.split("+")[0])
    report = Report(kind="train", library_versions=versions, hardware=hardware_info("cpu"))
    assert report.hardware is not None and report.hardware.device == "cpu"
    assert report.hardware.cpu_count >= 1
