"""The five recycling methods on both model kinds, with LoRA, full deltas, (IA)³ and prompts."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from core_helpers import (
    RECYCLE_CONFIG,
    TrainedAdapter,
    adapter_tensors,
    assert_report_fingerprints,
    attach,
    dev_batch,
    load_base,
    plain_peft,
    raw_logits,
    task_format,
    train,
)
from safetensors.torch import load_file

from recycling_core.adaptation import attach_adapter, full_checkpoint_to_delta, new_adapter
from recycling_core.adapters import (
    ADAPTER_CONFIG_NAME,
    DELTA_WEIGHTS_NAME,
    FULL_CHECKPOINT,
    FULL_DELTA,
    HEAD_WEIGHTS_NAME,
    LABELS_NAME,
    PROVENANCE_NAME,
    inspect_adapter_dir,
)
from recycling_core.data import load_task
from recycling_core.methods import METHODS, get_method
from recycling_core.models import inspect_model_dir, load_tokenizer
from recycling_core.pipeline import (
    CompatibilityRequest,
    RecycleRequest,
    adapter_options_like,
    compatibility_report,
    recycle_adapter,
)
from recycling_core.reports import Report
from recycling_core.tasking import evaluate
from recycling_core.training import Progress, RunHooks, Trainer, TrainingConfig

METHOD_NAMES = ("direct", "init", "distill", "init_distill", "fresh")


def _recycle(
    method: str, source: TrainedAdapter, out: Path, config: TrainingConfig = RECYCLE_CONFIG, **kw
) -> Report:
    report = recycle_adapter(
        RecycleRequest(
            method, source.adapter, source.old, source.new, source.task, out, training=config, **kw
        )
    )
    assert (out / "report.json").is_file()
    assert Report.read(out / "report.json") == report  # written, schema-valid, complete
    return report


def _direct_dev(source: TrainedAdapter, seed: int = 0) -> Report:
    """M1 + A0 on the dev split, without any training (what ``init`` must start from)."""
    return compatibility_report(
        CompatibilityRequest(
            source.adapter, source.old, source.new, source.task, split="dev", seed=seed
        )
    )


def _check_report(
    report: Report, method: str, source: TrainedAdapter, out: Path, config: TrainingConfig
) -> None:
    assert report.schema_version == "1.0"
    assert report.kind == "recycle"
    assert report.method == method
    assert report.seed == config.seed
    assert report.hyperparameters == asdict(config)
    assert {"torch", "transformers", "peft"} <= set(report.library_versions)
    assert report.hardware is not None and report.hardware.device == "cpu"
    assert_report_fingerprints(
        report,
        old_base=source.old,
        new_base=source.new,
        adapter=source.adapter,
        task_dir=source.task,
    )
    assert report.output["adapter_fingerprint"] == inspect_adapter_dir(out).fingerprint
    compat = report.metrics.compatibility
    assert compat is not None and compat.split == "test"
    assert compat.retention == pytest.approx(
        compat.direct / compat.source if compat.source else 0.0
    )
    assert report.metrics.test is not None and report.metrics.test.split == "test"
    assert (
        report.metrics.weight_distance is not None
        and report.metrics.weight_distance.relative_l2 > 0
    )
    assert report.cost.wall_seconds > 0 and report.cost.tokens > 0
    provenance = json.loads((out / PROVENANCE_NAME).read_text())
    assert provenance["method"] == method
    assert provenance["recycled_from"] == inspect_adapter_dir(source.adapter).fingerprint
    assert provenance["base_signature"] == inspect_model_dir(source.new).signature
    if get_method(method).trains:
        assert report.curve is not None and report.curve.points[-1].step == config.steps
        assert [p.step for p in report.curve.points] == list(
            range(0, config.steps + 1, config.eval_every)
        )
        assert report.metrics.convergence is not None
        assert report.metrics.dev is not None
    else:
        assert report.curve is None and report.metrics.convergence is None


def test_registry_holds_the_five_methods() -> None:
    assert set(METHODS) == set(METHOD_NAMES)
    assert not get_method("direct").trains
    assert get_method("init").starts_from_old and not get_method("init").distills
    assert get_method("distill").distills and not get_method("distill").starts_from_old
    assert get_method("init_distill").distills and get_method("init_distill").starts_from_old
    assert not get_method("fresh").starts_from_old and not get_method("fresh").distills


# ----------------------------------------------------------------------------- all five, LoRA
@pytest.mark.parametrize("method", METHOD_NAMES)
def test_method_with_lora(method: str, lora: TrainedAdapter, tmp_path: Path) -> None:
    out = tmp_path / method
    report = _recycle(method, lora, out)
    _check_report(report, method, lora, out, RECYCLE_CONFIG)
    info = inspect_adapter_dir(out)
    assert info.peft_type == "LORA"
    assert info.label2id == load_task(lora.task).label2id
    assert json.loads((out / ADAPTER_CONFIG_NAME).read_text())["base_model_name_or_path"] == str(
        lora.new
    )

    # the recycled adapter loads in plain PEFT on the upgraded base, with our logits
    num_labels = 3 if lora.kind == "encoder" else None
    _, batch = dev_batch(lora.new, lora.task)
    ours = raw_logits(attach(lora.new, out, lora.task, seed=11).model, batch)
    theirs = raw_logits(plain_peft(lora.new, out, lora.kind, num_labels), batch)
    assert torch.allclose(ours, theirs, atol=1e-5)

    if method == "direct":
        # trains nothing: the adapter tensors are A0's, bit for bit
        before, after = adapter_tensors(lora.adapter), adapter_tensors(out)
        assert before.keys() == after.keys()
        assert all(torch.equal(before[k], after[k]) for k in before)
        assert report.metrics.test.accuracy == report.metrics.compatibility.direct
    elif method in ("init", "init_distill"):
        # starts from A0 on M1: the step-0 dev evaluation is M1 + A0's dev score
        direct = _direct_dev(lora)
        first = report.curve.points[0]
        assert first.step == 0
        assert first.metric == direct.metrics.compatibility.direct
        assert first.loss == pytest.approx(direct.metrics.dev.loss, rel=1e-5)
    else:
        # distill and fresh start from the new base with a fresh adapter: step 0 = untrained head
        base = load_base(lora.new, lora.task, seed=RECYCLE_CONFIG.seed)
        fmt = task_format(lora.new, lora.task)
        untrained = evaluate(base.model, fmt, fmt.encode(fmt.task.dev), split="dev").score
        first = report.curve.points[0]
        assert first.metric == untrained.accuracy
        assert first.loss == pytest.approx(untrained.loss, rel=1e-5)
    if method != "direct":
        # it trained for every step, and kept the best dev checkpoint: A0 itself for the methods
        # that start from A0 when no step beat it, a trained adapter otherwise
        assert [step for step, _ in report.curve.train_loss] == list(
            range(1, RECYCLE_CONFIG.steps + 1)
        )
        best = max(report.curve.points, key=lambda p: p.metric)
        assert report.curve.best_metric == best.metric == report.metrics.dev.accuracy
        before, after = adapter_tensors(lora.adapter), adapter_tensors(out)
        same_as_a0 = all(torch.equal(before[k], after[k]) for k in before)
        assert same_as_a0 == (report.curve.best_step == 0 and get_method(method).starts_from_old)


def test_init_and_fresh_differ_only_in_their_start(
    encoder_lora: TrainedAdapter, tmp_path: Path
) -> None:
    """With one step at a tiny learning rate, init stays next to A0 and fresh next to the base."""
    config = TrainingConfig(steps=1, eval_every=1, batch_size=8, learning_rate=1e-6, seed=0)
    init = _recycle("init", encoder_lora, tmp_path / "init", config)
    fresh = _recycle("fresh", encoder_lora, tmp_path / "fresh", config)
    a0 = adapter_tensors(encoder_lora.adapter)
    init_tensors, fresh_tensors = (
        adapter_tensors(tmp_path / "init"),
        adapter_tensors(tmp_path / "fresh"),
    )
    key = next(k for k in a0 if "lora_B" in k)
    assert torch.allclose(init_tensors[key], a0[key], atol=1e-4)
    assert torch.count_nonzero(a0[key]) > 0
    assert torch.allclose(fresh_tensors[key], torch.zeros_like(fresh_tensors[key]), atol=1e-4)
    assert init.curve.points[0].metric == _direct_dev(encoder_lora).metrics.compatibility.direct
    assert fresh.curve is not None


# ----------------------------------------------------------------------------- distillation
def _kl_to_teacher(
    student: torch.nn.Module, teacher: torch.nn.Module, source: TrainedAdapter, temperature: float
) -> float:
    fmt, batch = dev_batch(source.new, source.task, n=48)
    with torch.no_grad():
        student.eval()
        teacher.eval()
        return float(
            fmt.distillation_loss(
                fmt.output_logits(student, batch),
                fmt.output_logits(teacher, batch),
                batch,
                temperature,
            )
        )


@pytest.mark.parametrize("kind", ["encoder", "causal"])
def test_distill_moves_the_student_towards_the_teacher(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """With a = 1 the loss is the KL to the frozen teacher M0 + A0 alone, and training lowers it."""
    source: TrainedAdapter = request.getfixturevalue(f"{kind}_lora")
    config = replace(RECYCLE_CONFIG, distill_alpha=1.0, steps=24, eval_every=12)
    teacher = attach(source.old, source.adapter, source.task).model  # M0 + A0, frozen
    teacher_state = {k: v.clone() for k, v in teacher.state_dict().items()}
    # the student as distill starts it: a fresh adapter of A0's shape on M1
    student = new_adapter(
        load_base(source.new, source.task, seed=config.seed),
        adapter_options_like(inspect_adapter_dir(source.adapter)),
        dict(load_task(source.task).label2id),
    )
    fmt = task_format(source.new, source.task)
    kl = {"before": _kl_to_teacher(student.model, teacher, source, config.distill_temperature)}

    def on_progress(progress: Progress) -> None:
        if progress.step == progress.total:  # the last step, before the best checkpoint is restored
            kl["after"] = _kl_to_teacher(student.model, teacher, source, config.distill_temperature)
            student.model.train()

    def teacher_forward(batch, with_hidden):
        return fmt.forward(teacher, batch, with_hidden=with_hidden)

    result = Trainer(
        student,
        fmt,
        fmt.encode(fmt.task.train),
        fmt.encode(fmt.task.dev),
        config,
        RunHooks(progress=on_progress),
        teacher=teacher_forward,
    ).run()
    assert kl["after"] < 0.9 * kl["before"], kl
    # the training loss is that KL on the training batches: it falls as well
    losses = [loss for _, loss in result.curve.train_loss]
    assert sum(losses[-4:]) < sum(losses[:4])
    # the teacher stayed frozen
    assert all(torch.equal(v, teacher.state_dict()[k]) for k, v in teacher_state.items())

    # through the pipeline: same objective, and the report shows the falling KL loss
    report = _recycle("distill", source, tmp_path / "distill", config)
    pipeline_losses = [loss for _, loss in report.curve.train_loss]
    assert sum(pipeline_losses[-4:]) < sum(pipeline_losses[:4])


def test_distillation_loss_is_the_design_formula(causal_lora: TrainedAdapter) -> None:
    """(1−a)·CE + a·T²·KL(teacher_T ‖ student_T), batch mean per sample; labels unused at a = 1."""
    source = causal_lora
    fmt, batch = dev_batch(source.new, source.task, n=8)
    student = attach_adapter(
        load_base(source.new, source.task), inspect_adapter_dir(source.adapter), trainable=True
    )
    student.model.eval()
    teacher_logits = torch.randn(batch.size, 3, generator=torch.Generator().manual_seed(0)) * 3

    def teacher(b, with_hidden):
        return teacher_logits, None

    features = fmt.encode(fmt.task.dev[:8])
    with torch.no_grad():
        student_logits = fmt.output_logits(student.model, batch)
    ce = F.cross_entropy(student_logits, batch.class_ids)
    for alpha, temperature in ((0.3, 2.0), (1.0, 1.5), (0.0, 2.0)):
        config = TrainingConfig(steps=1, distill_alpha=alpha, distill_temperature=temperature)
        trainer = Trainer(student, fmt, features, features, config, teacher=teacher)
        p_teacher = torch.softmax(teacher_logits / temperature, dim=-1)
        log_ratio = torch.log_softmax(teacher_logits / temperature, -1) - torch.log_softmax(
            student_logits / temperature, -1
        )
        kl = (p_teacher * log_ratio).sum(dim=-1).mean()
        expected = (1 - alpha) * ce + alpha * temperature**2 * kl
        with torch.no_grad():
            assert float(trainer._loss(batch)) == pytest.approx(float(expected), rel=1e-5)
            shuffled = replace(batch, class_ids=(batch.class_ids + 1) % 3)
            changed = float(trainer._loss(shuffled)) != pytest.approx(float(expected), rel=1e-5)
        assert changed == (alpha < 1.0)  # at a = 1 the labels play no part


# ----------------------------------------------------------------------------- causal generation
@pytest.mark.parametrize("method", ["init", "distill"])
def test_generation_task_methods(
    method: str, causal_gen_lora: TrainedAdapter, tmp_path: Path
) -> None:
    source = causal_gen_lora
    config = TrainingConfig(steps=6, eval_every=3, batch_size=16, learning_rate=2e-2, seed=0)
    out = tmp_path / method
    report = _recycle(method, source, out, config)
    _check_report(report, method, source, out, config)
    assert report.curve.metric_name == "exact_match"
    assert report.metrics.compatibility.metric_name == "exact_match"
    assert report.metrics.test.exact_match is not None
    assert inspect_adapter_dir(out).label2id is None
    if method == "init":
        direct = _direct_dev(source)
        assert report.curve.points[0].metric == direct.metrics.compatibility.direct
        assert report.curve.points[0].loss == pytest.approx(direct.metrics.dev.loss, rel=1e-5)
    else:
        teacher = attach(source.old, source.adapter, source.task).model
        fmt, batch = dev_batch(source.new, source.task, n=16)
        start = load_base(source.new, source.task).model
        after = attach(source.new, out, source.task).model
        with torch.no_grad():
            t_logits = fmt.output_logits(teacher, batch)
            before = float(
                fmt.distillation_loss(fmt.output_logits(start, batch), t_logits, batch, 2.0)
            )
            now = float(
                fmt.distillation_loss(fmt.output_logits(after, batch), t_logits, batch, 2.0)
            )
        assert now < before


# ----------------------------------------------------------------------------- full fine-tuning
@pytest.fixture(scope="module")
def full_sources(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> dict[str, TrainedAdapter]:
    """Full fine-tunes of M0 with a real task vector: the trained LoRA models, merged and saved
    as plain Hugging Face checkpoints, then turned into FULL_DELTA adapters against M0."""
    root = tmp_path_factory.mktemp("full")
    sources = {}
    for kind in ("encoder", "causal"):
        lora: TrainedAdapter = request.getfixturevalue(f"{kind}_lora")
        checkpoint = root / f"{kind}_checkpoint"
        attach(lora.old, lora.adapter, lora.task).merged_model().save_pretrained(str(checkpoint))
        load_tokenizer(lora.old).save_pretrained(str(checkpoint))
        assert inspect_adapter_dir(checkpoint).peft_type == FULL_CHECKPOINT
        full_checkpoint_to_delta(
            inspect_adapter_dir(checkpoint), load_base(lora.old, lora.task), root / kind
        )
        sources[kind] = TrainedAdapter(
            kind, lora.old, lora.new, lora.task, root / kind, lora.report
        )
        sources[f"{kind}_checkpoint"] = TrainedAdapter(
            kind, lora.old, lora.new, lora.task, checkpoint, lora.report
        )
    return sources


@pytest.mark.parametrize("kind", ["encoder", "causal"])
def test_direct_full_delta_is_the_task_vector(
    kind: str, full_sources: dict[str, TrainedAdapter], tmp_path: Path
) -> None:
    """direct for full fine-tunes: θ = M1 + (θ_tuned − M0), checked on real tensors."""
    source = full_sources[kind]
    assert inspect_adapter_dir(source.adapter).peft_type == FULL_DELTA
    out = tmp_path / "direct"
    report = _recycle("direct", source, out)
    _check_report(report, "direct", source, out, RECYCLE_CONFIG)
    assert report.peft_type == FULL_DELTA

    delta = load_file(str(source.adapter / DELTA_WEIGHTS_NAME))
    m0 = dict(load_base(source.old, source.task).model.named_parameters())
    m1 = dict(load_base(source.new, source.task).model.named_parameters())
    recycled = dict(attach(source.new, out, source.task, seed=21).model.named_parameters())
    name = (
        "bert.encoder.layer.0.attention.self.query.weight"
        if kind == "encoder"
        else "model.layers.0.self_attn.q_proj.weight"
    )
    assert name in delta and torch.count_nonzero(delta[name]) > 0
    tuned = m0[name].detach() + delta[name]  # θ_tuned of the source, on M0
    expected = m1[name].detach() + (tuned - m0[name].detach())
    assert not torch.allclose(m1[name], m0[name])
    assert torch.allclose(recycled[name].detach(), expected, atol=1e-6)
    # over every tuned parameter, not only one
    for key, value in delta.items():
        assert torch.allclose(recycled[key].detach(), m1[key].detach() + value, atol=1e-6), key
    if kind == "encoder":
        # the trained head travels absolute
        head = load_file(str(source.adapter / HEAD_WEIGHTS_NAME))
        assert torch.equal(recycled["classifier.weight"].detach(), head["classifier.weight"])
        assert torch.equal(
            load_file(str(out / HEAD_WEIGHTS_NAME))["classifier.weight"], head["classifier.weight"]
        )
    # the written delta of the recycled model is against M1 and equals A0's task vector
    written = load_file(str(out / DELTA_WEIGHTS_NAME))
    assert torch.allclose(written[name], delta[name], atol=1e-6)


@pytest.mark.parametrize("kind", ["encoder", "causal"])
def test_init_full_delta_starts_from_the_task_vector(
    kind: str, full_sources: dict[str, TrainedAdapter], tmp_path: Path
) -> None:
    source = full_sources[kind]
    config = TrainingConfig(steps=4, eval_every=2, batch_size=16, learning_rate=1e-3, seed=0)
    out = tmp_path / "init"
    report = _recycle("init", source, out, config)
    _check_report(report, "init", source, out, config)
    direct = _direct_dev(source)
    assert report.curve.points[0].metric == direct.metrics.compatibility.direct
    assert report.curve.points[0].loss == pytest.approx(direct.metrics.dev.loss, rel=1e-5)
    assert inspect_adapter_dir(out).peft_type == FULL_DELTA
    assert (out / LABELS_NAME).is_file()


@pytest.mark.parametrize("kind", ["encoder", "causal"])
def test_direct_accepts_a_full_checkpoint(
    kind: str,
    full_sources: dict[str, TrainedAdapter],
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    """A full fine-tuned HF directory is turned into its task vector against M0 first."""
    from_checkpoint = _recycle(
        "direct", full_sources[f"{kind}_checkpoint"], tmp_path / "from_checkpoint"
    )
    from_delta = _recycle("direct", full_sources[kind], tmp_path / "from_delta")
    assert from_checkpoint.peft_type == from_delta.peft_type == FULL_DELTA
    assert inspect_adapter_dir(tmp_path / "from_checkpoint").peft_type == FULL_DELTA
    source = full_sources[kind]
    _, batch = dev_batch(source.new, source.task)
    a = raw_logits(attach(source.new, tmp_path / "from_checkpoint", source.task).model, batch)
    b = raw_logits(attach(source.new, tmp_path / "from_delta", source.task).model, batch)
    assert torch.allclose(a, b, atol=1e-5)
    assert from_checkpoint.metrics.compatibility == from_delta.metrics.compatibility
    # source = M0 + (θ_tuned − M0) = θ_tuned: the LoRA model the checkpoint was merged from
    lora: TrainedAdapter = request.getfixturevalue(f"{kind}_lora")
    lora_compat = compatibility_report(
        CompatibilityRequest(lora.adapter, lora.old, lora.new, lora.task)
    )
    assert from_delta.metrics.compatibility.source == lora_compat.metrics.compatibility.source


# ----------------------------------------------------------------------------- (IA)³ and prompts
@pytest.fixture(scope="module")
def other_peft_sources(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> dict[tuple[str, str], TrainedAdapter]:
    root = tmp_path_factory.mktemp("other_peft")
    sources = {}
    for kind in ("encoder", "causal"):
        lora: TrainedAdapter = request.getfixturevalue(f"{kind}_lora")
        for peft in ("ia3", "prompt"):
            config = TrainingConfig(
                steps=6, eval_every=3, batch_size=16, learning_rate=3e-2, seed=0
            )
            out = root / f"{kind}_{peft}"
            report = train(lora.old, lora.task, out, peft=peft, config=config)
            sources[(kind, peft)] = TrainedAdapter(kind, lora.old, lora.new, lora.task, out, report)
    return sources


@pytest.mark.parametrize("method", ["direct", "init"])
@pytest.mark.parametrize("peft", ["ia3", "prompt"])
@pytest.mark.parametrize("kind", ["encoder", "causal"])
def test_ia3_and_prompt_direct_and_init(
    kind: str, peft: str, method: str, other_peft_sources: dict, tmp_path: Path
) -> None:
    source: TrainedAdapter = other_peft_sources[(kind, peft)]
    config = TrainingConfig(steps=4, eval_every=2, batch_size=16, learning_rate=3e-2, seed=0)
    out = tmp_path / method
    report = _recycle(method, source, out, config)
    _check_report(report, method, source, out, config)
    expected_type = {"ia3": "IA3", "prompt": "PROMPT_TUNING"}[peft]
    assert report.peft_type == expected_type == inspect_adapter_dir(out).peft_type
    before, after = adapter_tensors(source.adapter), adapter_tensors(out)
    assert before.keys() == after.keys()
    if method == "direct":
        assert all(torch.equal(before[k], after[k]) for k in before)
    else:
        direct = _direct_dev(source)
        assert report.curve.points[0].metric == direct.metrics.compatibility.direct
        assert report.curve.points[0].loss == pytest.approx(direct.metrics.dev.loss, rel=1e-5)
    # loads in plain PEFT on the new base with our logits
    _, batch = dev_batch(source.new, source.task)
    ours = raw_logits(attach(source.new, out, source.task, seed=4).model, batch)
    theirs = raw_logits(plain_peft(source.new, out, kind, 3 if kind == "encoder" else None), batch)
    assert torch.allclose(ours, theirs, atol=1e-5)
