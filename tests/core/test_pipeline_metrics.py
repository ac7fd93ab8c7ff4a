"""The metrics as the pipeline computes them on tiny models, against independent computations."""

from __future__ import annotations

from pathlib import Path

import pytest
from core_helpers import (
    RECYCLE_CONFIG,
    TrainedAdapter,
    assert_report_fingerprints,
    attach,
    task_format,
)
from safetensors.torch import load_file

from recycling_core.adapters import inspect_adapter_dir
from recycling_core.metrics import (
    CONNECTED_THRESHOLD,
    accuracy_barrier,
    loss_barrier,
    steps_to_target,
    weight_distance,
)
from recycling_core.models import inspect_model_dir
from recycling_core.pipeline import (
    CompatibilityRequest,
    InterpolationRequest,
    RecycleRequest,
    SimilarityRequest,
    attention_similarity,
    compatibility_report,
    interpolate,
    recycle_adapter,
)
from recycling_core.reports import Report
from recycling_core.tasking import evaluate


@pytest.fixture(scope="module")
def recycled(
    lora: TrainedAdapter, tmp_path_factory: pytest.TempPathFactory
) -> tuple[TrainedAdapter, Path, Report]:
    """A1: the ``init`` recycling of A0 onto M1 (per model kind)."""
    out = tmp_path_factory.mktemp(f"a1_{lora.kind}") / "init"
    report = recycle_adapter(
        RecycleRequest(
            "init", lora.adapter, lora.old, lora.new, lora.task, out, training=RECYCLE_CONFIG
        )
    )
    return lora, out, report


def _compat(source: TrainedAdapter, split: str = "test", **kw) -> Report:
    return compatibility_report(
        CompatibilityRequest(source.adapter, source.old, source.new, source.task, split=split, **kw)
    )


# ----------------------------------------------------------------------------- compatibility
def test_compatibility_metrics_by_hand(lora: TrainedAdapter) -> None:
    report = _compat(lora, fresh_score=0.9)
    fmt = task_format(lora.old, lora.task)
    features = fmt.encode(fmt.task.test)
    source = evaluate(attach(lora.old, lora.adapter, lora.task).model, fmt, features, split="test")
    direct = evaluate(attach(lora.new, lora.adapter, lora.task).model, fmt, features, split="test")
    labels = source.labels
    n = len(labels)
    c = report.metrics.compatibility
    assert c.source == sum(p == y for p, y in zip(source.predictions, labels)) / n
    assert c.direct == sum(p == y for p, y in zip(direct.predictions, labels)) / n
    assert c.retention == pytest.approx(c.direct / c.source)
    assert (
        c.negative_flip_rate
        == sum(s == y and d != y for s, d, y in zip(source.predictions, direct.predictions, labels))
        / n
    )
    assert c.agreement == sum(s == d for s, d in zip(source.predictions, direct.predictions)) / n
    floor = max(labels.count(k) for k in set(labels)) / n
    assert c.floor == floor
    assert c.recovery == pytest.approx((c.direct - floor) / (0.9 - floor))
    assert report.metrics.test == direct.score
    assert report.metrics.weight_distance.relative_l2 > 0
    assert_report_fingerprints(
        report, old_base=lora.old, new_base=lora.new, adapter=lora.adapter, task_dir=lora.task
    )


# ----------------------------------------------------------------------------- convergence
def test_convergence_from_the_curve(recycled) -> None:
    source, _a1, report = recycled
    conv = report.metrics.convergence
    source_dev = _compat(source, split="dev").metrics.compatibility.source
    assert conv.target_source == "source"
    assert conv.target == pytest.approx(0.99 * source_dev)
    points = [(p.step, p.metric) for p in report.curve.points]
    first = next((step for step, metric in points if metric >= conv.target), None)
    assert conv.steps_to_target == first == steps_to_target(report.curve.points, conv.target)


def test_convergence_with_a_given_target_and_fresh_steps(
    lora: TrainedAdapter, tmp_path: Path
) -> None:
    report = recycle_adapter(
        RecycleRequest(
            "init",
            lora.adapter,
            lora.old,
            lora.new,
            lora.task,
            tmp_path / "init",
            training=RECYCLE_CONFIG,
            target=0.0,
            fresh_steps_to_target=8,
        )
    )
    conv = report.metrics.convergence
    assert conv.target == 0.0 and conv.target_source == "given"
    assert conv.steps_to_target == 0  # reached before any update
    assert conv.speedup is None  # undefined at step 0
    assert conv.fresh_steps_to_target == 8


# ----------------------------------------------------------------------------- interpolation
def _interpolate(mode: str, source: TrainedAdapter, a1: Path, points: int = 3) -> Report:
    return interpolate(
        InterpolationRequest(
            mode,
            source.old,
            source.adapter,
            source.new,
            a1,
            source.task,
            points=points,
            split="test",
        )
    )


def test_interpolation_model_mode_endpoints(recycled) -> None:
    source, a1, init_report = recycled
    report = _interpolate("model", source, a1)
    i = report.metrics.interpolation
    assert i.mode == "model" and i.alphas == [0.0, 0.5, 1.0]
    compat = _compat(source).metrics.compatibility
    assert i.metrics[0] == compat.source  # α = 0: M0 + A0
    # α = 1: M1 + A1, exactly as the recycling run scored it on test
    assert i.metrics[-1] == init_report.metrics.test.accuracy
    assert i.losses[-1] == pytest.approx(init_report.metrics.test.loss, rel=1e-4)
    fmt = task_format(source.old, source.task)
    m0a0 = evaluate(
        attach(source.old, source.adapter, source.task).model,
        fmt,
        fmt.encode(fmt.task.test),
        split="test",
    )
    assert i.losses[0] == pytest.approx(m0a0.score.loss, rel=1e-4)
    # barriers and the connected flag come from the metrics module's definitions
    assert i.loss_barrier == loss_barrier(i.alphas, i.losses)
    assert i.accuracy_barrier == accuracy_barrier(i.alphas, i.metrics)
    assert i.connected == (i.accuracy_barrier <= CONNECTED_THRESHOLD)
    midpoint_gap = (i.metrics[0] + i.metrics[2]) / 2 - i.metrics[1]
    assert i.accuracy_barrier == pytest.approx(max(0.0, midpoint_gap))
    assert_report_fingerprints(
        report,
        old_base=source.old,
        new_base=source.new,
        adapter=source.adapter,
        task_dir=source.task,
    )
    assert {f.role for f in report.fingerprints} >= {"old_adapter", "new_adapter"}


def test_interpolation_adapter_mode_endpoints(recycled) -> None:
    source, a1, init_report = recycled
    report = _interpolate("adapter", source, a1)
    i = report.metrics.interpolation
    compat = _compat(source).metrics.compatibility
    assert i.mode == "adapter"
    assert i.metrics[0] == compat.direct  # α = 0: A0 on M1
    assert i.metrics[-1] == init_report.metrics.test.accuracy  # α = 1: A1 on M1
    assert i.loss_barrier == loss_barrier(i.alphas, i.losses)
    assert i.accuracy_barrier == accuracy_barrier(i.alphas, i.metrics)


def test_interpolating_an_adapter_with_itself_is_flat(lora: TrainedAdapter) -> None:
    """Adapter mode from A0 to A0 on M1: every α is the same model; both barriers vanish."""
    report = _interpolate("adapter", lora, lora.adapter, points=3)
    i = report.metrics.interpolation
    assert len(set(i.metrics)) == 1
    assert i.losses == pytest.approx([i.losses[0]] * 3, rel=1e-5)
    assert i.loss_barrier == pytest.approx(0.0, abs=1e-5)
    assert i.accuracy_barrier == 0.0 and i.connected


# ----------------------------------------------------------------------------- similarity
def test_similarity_of_a_model_with_itself_is_one(lora: TrainedAdapter) -> None:
    report = attention_similarity(
        SimilarityRequest(lora.old, lora.adapter, lora.old, lora.adapter, lora.task, probes=16)
    )
    s = report.metrics.similarity
    assert s.n_probes == 16
    assert len(s.matrix) == 2 and all(len(row) == 4 for row in s.matrix)  # layers × heads
    assert s.mean == pytest.approx(1.0, abs=1e-5)
    assert all(value == pytest.approx(1.0, abs=1e-5) for row in s.matrix for value in row)
    assert s.chance_level < 1.0


def test_similarity_old_and_new(recycled) -> None:
    source, a1, _ = recycled
    report = attention_similarity(
        SimilarityRequest(source.old, source.adapter, source.new, a1, source.task, probes=16)
    )
    s = report.metrics.similarity
    assert 0.0 < s.mean <= 1.0 + 1e-6 and s.chance_level < 1.0
    assert s.mean > s.chance_level  # a small upgrade keeps heads more alike than mismatched ones


# ----------------------------------------------------------------------------- weight distance
@pytest.mark.parametrize("kind", ["encoder", "causal"])
def test_upgrade_report_and_weight_distance(kind: str, request: pytest.FixtureRequest) -> None:
    report: Report = request.getfixturevalue(f"{kind}_upgrade")
    v0: Path = request.getfixturevalue(f"{kind}_v0")
    v1 = Path(report.output["model_dir"])
    assert report.kind == "upgrade"
    assert report.method == ("masked_lm" if kind == "encoder" else "next_token")
    distance = report.metrics.weight_distance
    assert distance.relative_l2 > 0 and distance.cosine < 1.0
    assert distance.cosine > 0.9  # a few steps: a small move
    layer = "bert.encoder.layer.0" if kind == "encoder" else "model.layers.0"
    assert distance.per_module[layer] > 0
    extra = report.metrics.extra
    assert {"held_out_loss_before", "held_out_loss_after", "final_train_loss"} <= set(extra)
    roles = {f.role: f for f in report.fingerprints}
    assert roles["base"].sha256 == inspect_model_dir(v0).fingerprint
    assert len(roles["corpus"].sha256) == 64
    assert (v1 / "upgrade_report.json").is_file()
    assert Report.read(v1 / "upgrade_report.json") == report
    info = inspect_model_dir(v1)
    assert info.signature == inspect_model_dir(v0).signature  # the same architecture and vocabulary
    if kind == "causal":
        # by hand from the two checkpoints (no tied or carried-over tensors in the tiny Llama)
        before, after = (
            load_file(str(v0 / "model.safetensors")),
            load_file(str(v1 / "model.safetensors")),
        )
        assert before.keys() == after.keys()
        diff = sum(float(((after[k].double() - before[k].double()) ** 2).sum()) for k in before)
        norm = sum(float((before[k].double() ** 2).sum()) for k in before)
        assert distance.relative_l2 == pytest.approx((diff / norm) ** 0.5, rel=1e-6)
        assert weight_distance(before, after).relative_l2 == pytest.approx(
            distance.relative_l2, rel=1e-6
        )


def test_recycle_report_weight_distance_is_the_upgrade(
    causal_lora: TrainedAdapter, causal_upgrade: Report, tmp_path: Path
) -> None:
    report = recycle_adapter(
        RecycleRequest(
            "direct",
            causal_lora.adapter,
            causal_lora.old,
            causal_lora.new,
            causal_lora.task,
            tmp_path / "d",
        )
    )
    assert report.metrics.weight_distance.relative_l2 == pytest.approx(
        causal_upgrade.metrics.weight_distance.relative_l2, rel=1e-6
    )
    assert report.output["adapter_fingerprint"] == inspect_adapter_dir(tmp_path / "d").fingerprint
