"""The runs recycling_core offers: train, compatibility, recycle, interpolate, similarity.

Each takes paths and config objects, does the whole job, writes what it produces, and returns a
validated :class:`~recycling_core.reports.Report`. The command line and the service's workers
call these and nothing deeper.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from recycling_core.adaptation import (
    AdaptedModel,
    AdapterOptions,
    attach_adapter,
    full_checkpoint_to_delta,
    new_adapter,
)
from recycling_core.adapters import (
    FULL_CHECKPOINT,
    FULL_DELTA,
    RUN_REPORT_NAME,
    TRAINABLE_PEFT_NAMES,
    AdapterInfo,
    adapter_manifest,
    inspect_adapter_dir,
)
from recycling_core.batched_training import TrainingMember, train_members
from recycling_core.compat import check_compatibility
from recycling_core.data import TaskData, few_shot_sample, load_task
from recycling_core.errors import ConfigError, DatasetError, JobCancelled
from recycling_core.files import manifest_digest
from recycling_core.methods import RecyclingMethod, get_method
from recycling_core.metrics import (
    AttentionSimilarityAccumulator,
    CostMeter,
    compatibility_metrics,
    convergence_metrics,
    default_target,
    hardware_info,
    interpolation_metrics,
    lerp_into_,
    library_versions,
    weight_distance,
)
from recycling_core.metrics import (
    alphas as alpha_grid,
)
from recycling_core.models import HeadSpec, LoadedBase, ModelInfo, get_base, inspect_model_dir
from recycling_core.multilora import batching_obstacle, cast_frozen_linears, interpolation_model
from recycling_core.reports import Fingerprint, Metrics, Report, TaskScore, WeightDistance
from recycling_core.tasking import (
    Batch,
    EvalResult,
    Feature,
    TaskFormat,
    autocast_context,
    evaluate,
    evaluate_slots,
)
from recycling_core.training import (
    CachedTeacher,
    Progress,
    RunHooks,
    TrainingConfig,
    TrainResult,
    resolve_device,
)

REPORT_NAME = RUN_REPORT_NAME


# ---------------------------------------------------------------------------- shared pieces
def _head_for(task: TaskData) -> HeadSpec:
    return HeadSpec(labels=tuple(task.labels), generation=task.kind == "generation")


def _task_with_few_shot(task: TaskData, few_shot: int | None, seed: int) -> TaskData:
    if not few_shot:
        return task
    if few_shot < 1:
        raise ConfigError("few_shot must be at least 1", field="few_shot")
    sampled = few_shot_sample(task.train, few_shot, seed)
    if not sampled:
        raise DatasetError("few-shot sampling left no training examples", field="train")
    return TaskData(**{**task.__dict__, "train": sampled})


def _label2id(task: TaskData) -> dict[str, int] | None:
    return dict(task.label2id) if task.kind == "classification" else None


def _model_fingerprint(role: str, info: ModelInfo) -> Fingerprint:
    return Fingerprint(role=role, sha256=info.fingerprint, path=str(info.path), files=info.manifest)


def _adapter_fingerprint(role: str, info: AdapterInfo) -> Fingerprint:
    return Fingerprint(role=role, sha256=info.fingerprint, path=str(info.path), files=info.manifest)


def _task_fingerprints(task: TaskData) -> list[Fingerprint]:
    return [
        Fingerprint(role=f"task:{split}", sha256=sha, path=str(task.split_files.get(split, task.directory)))
        for split, sha in sorted(task.fingerprints().items())
    ]


def _new_report(kind: str, config: TrainingConfig, device: torch.device, **fields: Any) -> Report:
    fields.setdefault("hyperparameters", asdict(config))
    return Report(
        kind=kind,  # type: ignore[arg-type]
        seed=config.seed,
        library_versions=library_versions(),
        hardware=hardware_info(device),
        **fields,
    )


def adapter_options_like(info: AdapterInfo) -> AdapterOptions:
    """Options for a fresh adapter of the same type and shape as an existing one."""
    config = info.config
    if info.peft_type in (FULL_DELTA, FULL_CHECKPOINT):
        return AdapterOptions(peft="full")
    if info.peft_type == "LORA":
        targets = config.get("target_modules")
        if isinstance(targets, str):
            targets = None  # a regex or "all-linear": let PEFT resolve it the same way again
        return AdapterOptions(
            peft="lora",
            lora_rank=int(config.get("r", 8)),
            lora_alpha=int(config.get("lora_alpha", 16)),
            lora_dropout=float(config.get("lora_dropout", 0.0)),
            target_modules=tuple(targets) if targets else None,
        )
    if info.peft_type == "IA3":
        targets = config.get("target_modules")
        return AdapterOptions(peft="ia3", target_modules=tuple(targets) if isinstance(targets, list) else None)
    return AdapterOptions(peft="prompt", num_virtual_tokens=int(config.get("num_virtual_tokens", 8)))


@dataclass
class _Workspace:
    """Temporary files of one run, removed when the run's ExitStack closes."""

    stack: ExitStack

    def directory(self, name: str) -> Path:
        path = Path(self.stack.enter_context(tempfile.TemporaryDirectory(prefix=f"recycle-{name}-")))
        return path


def _usable_adapter(info: AdapterInfo, old_base: LoadedBase, workspace: _Workspace) -> AdapterInfo:
    """A full fine-tuned checkpoint becomes a delta against its own base; others pass through."""
    if info.peft_type != FULL_CHECKPOINT:
        return info
    return full_checkpoint_to_delta(info, old_base, workspace.directory("delta"))


def _evaluate_split(
    adapted: AdaptedModel, task_format: TaskFormat, features: list[Feature], split: str, device: torch.device
) -> EvalResult:
    adapted.to(device)
    return evaluate(adapted.model, task_format, features, split=split, device=device)


def _load_adapted(
    model_info: ModelInfo,
    adapter: AdapterInfo,
    task: TaskData,
    hooks: RunHooks,
    *,
    seed: int,
    trainable: bool = False,
) -> AdaptedModel:
    base = get_base(model_info, _head_for(task), seed=seed, cache=hooks.cache)
    return attach_adapter(base, adapter, trainable=trainable)


def frozen_teacher(
    teacher: AdaptedModel, task_format: TaskFormat, device: torch.device, *, cache: bool = True
) -> CachedTeacher:
    """The frozen old adapted model as a teacher: adapter merged into its weights (no LoRA path on
    every forward), linear weights in bf16 on CUDA, logits cached per training example."""
    model = teacher.model if teacher.peft_type == "PROMPT_TUNING" else teacher.merged_model()
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    if device.type == "cuda":
        cast_frozen_linears(model, torch.bfloat16)
    model.to(device)

    def forward(batch: Batch, with_hidden: bool):
        with torch.inference_mode(mode=not with_hidden):
            logits, hidden = task_format.forward(model, batch, with_hidden=with_hidden)
        return logits.clone() if not with_hidden else logits, hidden

    return CachedTeacher(forward, classification=cache and task_format.classification)


def base_weight_distance(old: LoadedBase, new: LoadedBase) -> WeightDistance:
    """Relative L2 change and cosine M0→M1 over the checkpoint's own weights (no fresh heads)."""
    skip = set(old.initialized_keys) | set(new.initialized_keys)
    old_parameters = {k: v for k, v in old.model.named_parameters() if k not in skip}
    new_parameters = {k: v for k, v in new.model.named_parameters() if k not in skip}
    return weight_distance(old_parameters, new_parameters)


# ---------------------------------------------------------------------------- train
@dataclass(frozen=True)
class TrainRequest:
    """Tune a fresh adapter on a base model for a task."""

    base_dir: Path
    task_dir: Path
    out_dir: Path
    adapter: AdapterOptions = field(default_factory=AdapterOptions)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    few_shot: int | None = None
    job_id: str | None = None


def train_adapter(request: TrainRequest, hooks: RunHooks | None = None) -> Report:
    """Train a fresh adapter and write it (PEFT layout) plus ``report.json`` to ``out_dir``."""
    hooks = hooks or RunHooks()
    config = request.training
    device = resolve_device(config.device)
    meter = CostMeter(device)
    meter.start()
    base_info = inspect_model_dir(request.base_dir)
    full_task = load_task(request.task_dir)
    task = _task_with_few_shot(full_task, request.few_shot, config.seed)
    base = get_base(base_info, _head_for(task), seed=config.seed, cache=hooks.cache)
    adapted = new_adapter(base, request.adapter, _label2id(task), seed=config.seed)
    task_format = TaskFormat(task, base.tokenizer, base_info.kind, max_length=config.max_length)
    train_features = task_format.encode(task.train)
    member = TrainingMember(adapted, task_format, train_features, task_format.encode(task.dev), config, hooks)
    result = train_members([member])[0]
    if isinstance(result, JobCancelled):
        raise result
    test = _evaluate_split(adapted, task_format, task_format.encode(task.test), "test", device)
    out_dir = Path(request.out_dir)
    adapted.save(out_dir, provenance={"method": "train", "task": task.name})
    meter.add_tokens(result.cost.tokens + test.tokens)
    stored = adapter_manifest(out_dir)
    report = _new_report(
        "train",
        config,
        device,
        job_id=request.job_id,
        method="train",
        peft_type=adapted.peft_type,
        fingerprints=[_model_fingerprint("base", base_info), *_task_fingerprints(full_task)],
        metrics=Metrics(test=test.score, dev=result.best_dev),
        curve=result.curve,
        cost=meter.stop(),
        output={
            "adapter_dir": str(out_dir),
            "adapter_fingerprint": manifest_digest(stored),
            "few_shot": request.few_shot,
            "train_examples": len(task.train),
            "adapter_options": asdict(request.adapter),
        },
    )
    report.write(out_dir / REPORT_NAME)
    return report


# ---------------------------------------------------------------------------- compatibility
@dataclass(frozen=True)
class CompatibilityRequest:
    """Measure how well an outdated adapter works on the upgraded model without training."""

    adapter_dir: Path
    old_base_dir: Path
    new_base_dir: Path
    task_dir: Path
    split: Literal["dev", "test"] = "test"
    fresh_score: float | None = None
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    job_id: str | None = None


@dataclass
class _Compatibility:
    source: EvalResult
    direct: EvalResult
    source_dev: EvalResult
    direct_model: AdaptedModel
    old_model: AdaptedModel
    task_format: TaskFormat
    distance: WeightDistance


def _measure_compatibility(
    adapter: AdapterInfo,
    old_info: ModelInfo,
    new_info: ModelInfo,
    task: TaskData,
    hooks: RunHooks,
    *,
    seed: int,
    device: torch.device,
    split: str,
    workspace: _Workspace,
    trainable_direct: bool = False,
    max_length: int = 128,
) -> tuple[_Compatibility, AdapterInfo]:
    check_compatibility(adapter, old_info, labels=task.labels if task.kind == "classification" else None)
    old_base = get_base(old_info, _head_for(task), seed=seed, cache=hooks.cache)
    adapter = _usable_adapter(adapter, old_base, workspace)
    check_compatibility(adapter, new_info, labels=task.labels if task.kind == "classification" else None)
    new_base = get_base(new_info, _head_for(task), seed=seed, cache=hooks.cache)
    distance = base_weight_distance(old_base, new_base)
    old_model = attach_adapter(old_base, adapter, trainable=False)
    task_format = TaskFormat(task, old_base.tokenizer, old_info.kind, max_length=max_length)
    eval_features = task_format.encode(task.split(split))
    source = _evaluate_split(old_model, task_format, eval_features, split, device)
    source_dev = source if split == "dev" else _evaluate_split(
        old_model, task_format, task_format.encode(task.dev), "dev", device
    )
    hooks.check_cancel()
    direct_model = attach_adapter(new_base, adapter, trainable=trainable_direct)
    direct = _evaluate_split(direct_model, task_format, eval_features, split, device)
    return _Compatibility(source, direct, source_dev, direct_model, old_model, task_format, distance), adapter


def _compatibility_metrics(result: _Compatibility, task: TaskData, split: str, fresh: float | None):
    if task.kind == "classification":
        return compatibility_metrics(
            result.source.labels,
            result.source.predictions,
            result.direct.predictions,
            metric_name="accuracy",
            split=split,
            num_labels=len(task.labels),
            fresh_score=fresh,
        )
    references = [example.response or "" for example in task.split(split)]
    return compatibility_metrics(
        references,
        result.source.predicted_texts,
        result.direct.predicted_texts,
        metric_name="exact_match",
        split=split,
        fresh_score=fresh,
    )


def compatibility_report(request: CompatibilityRequest, hooks: RunHooks | None = None) -> Report:
    """source, direct, retention, negative flips, agreement (and recovery given a fresh score)."""
    hooks = hooks or RunHooks()
    device = resolve_device(request.device)
    meter = CostMeter(device)
    meter.start()
    old_info = inspect_model_dir(request.old_base_dir)
    new_info = inspect_model_dir(request.new_base_dir)
    adapter = inspect_adapter_dir(request.adapter_dir)
    task = load_task(request.task_dir)
    with ExitStack() as stack:
        workspace = _Workspace(stack)
        result, _ = _measure_compatibility(
            adapter, old_info, new_info, task, hooks, seed=request.seed, device=device,
            split=request.split, workspace=workspace,
        )
    meter.add_tokens(result.source.tokens + result.direct.tokens + result.source_dev.tokens)
    config = TrainingConfig(seed=request.seed, device=request.device)
    return _new_report(
        "compatibility",
        config,
        device,
        job_id=request.job_id,
        method="direct",
        peft_type=adapter.peft_type,
        hyperparameters={"split": request.split, "seed": request.seed},
        fingerprints=[
            _model_fingerprint("old_base", old_info),
            _model_fingerprint("new_base", new_info),
            _adapter_fingerprint("adapter", adapter),
            *_task_fingerprints(task),
        ],
        metrics=Metrics(
            test=result.direct.score if request.split == "test" else None,
            dev=result.direct.score if request.split == "dev" else None,
            compatibility=_compatibility_metrics(result, task, request.split, request.fresh_score),
            weight_distance=result.distance,
        ),
        cost=meter.stop(),
    )


# ---------------------------------------------------------------------------- recycle
@dataclass(frozen=True)
class RecycleRequest:
    """Recycle an outdated adapter A0 (tuned on M0) for the upgraded model M1."""

    method: str
    adapter_dir: Path
    old_base_dir: Path
    new_base_dir: Path
    task_dir: Path
    out_dir: Path
    training: TrainingConfig = field(default_factory=TrainingConfig)
    few_shot: int | None = None
    target: float | None = None
    fresh_best: float | None = None
    fresh_steps_to_target: int | None = None
    fresh_test: float | None = None
    job_id: str | None = None


@dataclass
class _PreparedRecycle:
    """A recycling run up to its training: inputs checked, compatibility measured, student ready."""

    request: RecycleRequest
    hooks: RunHooks
    method: RecyclingMethod
    device: torch.device
    meter: CostMeter
    old_info: ModelInfo
    new_info: ModelInfo
    original_adapter: AdapterInfo
    adapter: AdapterInfo
    full_task: TaskData
    task: TaskData
    compat: _Compatibility
    adapted: AdaptedModel
    member: TrainingMember | None
    tokens: int


def _prepare_recycle(request: RecycleRequest, hooks: RunHooks, workspace: _Workspace) -> _PreparedRecycle:
    method = get_method(request.method)
    config = request.training
    device = resolve_device(config.device)
    meter = CostMeter(device)
    meter.start()
    old_info = inspect_model_dir(request.old_base_dir)
    new_info = inspect_model_dir(request.new_base_dir)
    original_adapter = inspect_adapter_dir(request.adapter_dir)
    full_task = load_task(request.task_dir)
    task = _task_with_few_shot(full_task, request.few_shot, config.seed)
    compat, adapter = _measure_compatibility(
        original_adapter, old_info, new_info, task, hooks, seed=config.seed, device=device,
        split="test", workspace=workspace, trainable_direct=method.starts_from_old and method.trains,
        max_length=config.max_length,  # the same truncation as train_adapter (TrainingConfig)
    )
    tokens = compat.source.tokens + compat.direct.tokens + compat.source_dev.tokens
    adapted = compat.direct_model
    member = None
    if method.trains:
        hooks.check_cancel()
        if not method.starts_from_old:
            fresh_base = get_base(new_info, _head_for(task), seed=config.seed, cache=hooks.cache)
            adapted = new_adapter(fresh_base, adapter_options_like(adapter), _label2id(task), seed=config.seed)
        task_format = compat.task_format
        teacher = frozen_teacher(compat.old_model, task_format, device) if method.distills else None
        if teacher is None or compat.old_model.peft_type != "PROMPT_TUNING":
            compat.old_model.model.to("cpu")  # a prompt-tuning teacher is the old model itself
        member = TrainingMember(
            student=adapted,
            task_format=task_format,
            train_features=task_format.encode(task.train),
            dev_features=task_format.encode(task.dev),
            config=config,
            hooks=hooks,
            teacher=teacher,
        )
    return _PreparedRecycle(
        request, hooks, method, device, meter, old_info, new_info, original_adapter, adapter,
        full_task, task, compat, adapted, member, tokens,
    )  # fmt: skip


def _finish_recycle(prepared: _PreparedRecycle, result: TrainResult | None) -> Report:
    """Test the recycled adapter, write it and its report."""
    request, compat, adapted = prepared.request, prepared.compat, prepared.adapted
    task_format = compat.task_format
    tokens = prepared.tokens
    curve = None
    convergence = None
    dev_score: TaskScore | None = None
    if result is None:
        test_score = compat.direct.score
    else:
        tokens += result.cost.tokens
        curve = result.curve
        dev_score = result.best_dev
        test_eval = _evaluate_split(
            adapted, task_format, task_format.encode(prepared.task.test), "test", prepared.device
        )
        tokens += test_eval.tokens
        test_score = test_eval.score
        if request.target is not None:
            target, source_name = request.target, "given"
        else:
            target, source_name = default_target(fresh_best=request.fresh_best, source=compat.source_dev.score.primary)
        convergence = convergence_metrics(
            result.curve.points, target, source_name, request.fresh_steps_to_target  # type: ignore[arg-type]
        )
    if adapted.label2id is None:
        # an input without label2id.json (e.g. a full checkpoint of a causal LM): the
        # recycled adapter was checked and scored with the task's label order; record it
        adapted.label2id = _label2id(prepared.task)
    out_dir = Path(request.out_dir)
    staging = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    adapted.save(
        staging,
        provenance={
            "method": prepared.method.name,
            "recycled_from": prepared.original_adapter.fingerprint,
            "old_base_fingerprint": prepared.old_info.fingerprint,
        },
    )
    if out_dir.exists():
        shutil.rmtree(out_dir)
    staging.rename(out_dir)
    prepared.meter.add_tokens(tokens)
    output: dict[str, Any] = {
        "adapter_dir": str(out_dir),
        "adapter_fingerprint": manifest_digest(adapter_manifest(out_dir)),
        "few_shot": request.few_shot,
        "train_examples": len(prepared.task.train),
    }
    cost = prepared.meter.stop()
    if result is not None and "batched_with" in result.extra:
        output["batched_with"] = int(result.extra["batched_with"])
        cost = cost.model_copy(update={"wall_seconds": cost.wall_seconds - result.extra["batch_wall_seconds"]
                                       + result.cost.wall_seconds})
    report = _new_report(
        "recycle",
        request.training,
        prepared.device,
        job_id=request.job_id,
        method=prepared.method.name,
        peft_type=prepared.adapter.peft_type,
        fingerprints=[
            _model_fingerprint("old_base", prepared.old_info),
            _model_fingerprint("new_base", prepared.new_info),
            _adapter_fingerprint("adapter", prepared.original_adapter),
            *_task_fingerprints(prepared.full_task),
        ],
        metrics=Metrics(
            test=test_score,
            dev=dev_score,
            compatibility=_compatibility_metrics(compat, prepared.task, "test", request.fresh_test),
            convergence=convergence,
            weight_distance=compat.distance,
        ),
        curve=curve,
        cost=cost,
        output=output,
    )
    report.write(out_dir / REPORT_NAME)
    return report


def recycle_adapter(request: RecycleRequest, hooks: RunHooks | None = None) -> Report:
    """Run one recycling method; write the recycled adapter and ``report.json`` to ``out_dir``.

    Every method first checks the adapter against both bases and measures ``source`` (M0+A0)
    and ``direct`` (M1+A0) on the test split; training methods then tune on M1 and report test
    scores, the dev curve and steps to the convergence target (``target`` if given, else 99% of
    ``fresh_best`` if given, else 99% of the source adapter's dev score).
    """
    report = recycle_adapters([request], [hooks or RunHooks()])[0]
    if isinstance(report, BaseException):
        raise report
    return report


def recycle_adapters(
    requests: Sequence[RecycleRequest], hooks: Sequence[RunHooks]
) -> list[Report | BaseException]:
    """Recycle several adapters; those that train on one base share one batched pass.

    Each request gets its own report or the error that stopped it (a bad adapter fails only its
    own request). Training members that cannot share a pass train one after another.
    """
    if len(requests) != len(hooks):
        raise ConfigError("one RunHooks per request", field="hooks")
    outcomes: list[Report | BaseException | None] = [None] * len(requests)
    with ExitStack() as stack:
        workspace = _Workspace(stack)
        prepared: dict[int, _PreparedRecycle] = {}
        for index, (request, run_hooks) in enumerate(zip(requests, hooks)):
            try:
                prepared[index] = _prepare_recycle(request, run_hooks, workspace)
            except Exception as error:
                if len(requests) == 1:
                    raise
                outcomes[index] = error
        training = [index for index, item in prepared.items() if item.member is not None]
        members = [prepared[index].member for index in training]
        results = dict(zip(training, train_members(members))) if members else {}  # type: ignore[arg-type]
        for index, item in prepared.items():
            result = results.get(index)
            if isinstance(result, JobCancelled):
                outcomes[index] = result
                continue
            try:
                outcomes[index] = _finish_recycle(item, result)
            except Exception as error:
                if len(requests) == 1:
                    raise
                outcomes[index] = error
    return [outcome for outcome in outcomes if outcome is not None]


# ---------------------------------------------------------------------------- pairs
@dataclass
class _AdaptedPair:
    """The inputs of a run that compares the old adapted model with the new one."""

    old_info: ModelInfo
    new_info: ModelInfo
    old_adapter_original: AdapterInfo
    old_adapter: AdapterInfo
    new_adapter: AdapterInfo
    task: TaskData
    old_base: LoadedBase

    def fingerprints(self) -> list[Fingerprint]:
        return [
            _model_fingerprint("old_base", self.old_info),
            _model_fingerprint("new_base", self.new_info),
            _adapter_fingerprint("old_adapter", self.old_adapter_original),
            _adapter_fingerprint("new_adapter", self.new_adapter),
            *_task_fingerprints(self.task),
        ]


def _load_pair(
    old_base_dir: Path,
    old_adapter_dir: Path,
    new_base_dir: Path,
    new_adapter_dir: Path,
    task_dir: Path,
    *,
    seed: int,
    hooks: RunHooks,
    workspace: _Workspace,
    old_adapter_on_new_base: bool,
) -> _AdaptedPair:
    """Inspect and check both adapters against their bases; load the old base."""
    old_info = inspect_model_dir(old_base_dir)
    new_info = inspect_model_dir(new_base_dir)
    old_adapter_original = inspect_adapter_dir(old_adapter_dir)
    new_adapter = inspect_adapter_dir(new_adapter_dir)
    task = load_task(task_dir)
    labels = task.labels if task.kind == "classification" else None
    old_base = get_base(old_info, _head_for(task), seed=seed, cache=hooks.cache)
    old_adapter = _usable_adapter(old_adapter_original, old_base, workspace)
    check_compatibility(old_adapter, old_info, labels=labels)
    if old_adapter_on_new_base:
        check_compatibility(old_adapter, new_info, labels=labels)
    check_compatibility(new_adapter, new_info, labels=labels)
    return _AdaptedPair(old_info, new_info, old_adapter_original, old_adapter, new_adapter, task, old_base)


# ---------------------------------------------------------------------------- interpolation
@dataclass(frozen=True)
class InterpolationRequest:
    """Linear interpolation between the old adapted model and the new one (DESIGN §6)."""

    mode: Literal["model", "adapter"]
    old_base_dir: Path
    old_adapter_dir: Path
    new_base_dir: Path
    new_adapter_dir: Path
    task_dir: Path
    points: int = 11
    split: Literal["dev", "test"] = "test"
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    job_id: str | None = None


def _merged_parameters(adapted: AdaptedModel) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """A plain merged model and a CPU copy of its floating state (the interpolation endpoint)."""
    merged = adapted.merged_model()
    state = {k: v.detach().to("cpu", copy=True) for k, v in merged.state_dict().items()}
    return merged, state


def interpolate(request: InterpolationRequest, hooks: RunHooks | None = None) -> Report:
    """Sweep α over ``points`` values; report loss and metric at each, barriers and ``connected``.

    ``model`` mode: θ(α) = (1−α)·(M0⊕A0) + α·(M1⊕A1) over all merged parameters. ``adapter``
    mode: on M1, the weight update lerps the products, ΔW(α) = (1−α)·ΔW_A0 + α·ΔW_A1, heads lerped.
    One model is kept in memory and rewritten in place for every α (no reload from disk).
    """
    hooks = hooks or RunHooks()
    if request.points < 2:
        raise ConfigError("points must be at least 2", field="points")
    device = resolve_device(request.device)
    meter = CostMeter(device)
    meter.start()
    with ExitStack() as stack:
        pair = _load_pair(
            request.old_base_dir, request.old_adapter_dir, request.new_base_dir, request.new_adapter_dir,
            request.task_dir, seed=request.seed, hooks=hooks, workspace=_Workspace(stack),
            old_adapter_on_new_base=True,
        )
        task, new_info = pair.task, pair.new_info
        if request.mode == "model":
            end_a = attach_adapter(pair.old_base, pair.old_adapter, trainable=False)
        else:
            end_a = _load_adapted(new_info, pair.old_adapter, task, hooks, seed=request.seed)
        end_b = _load_adapted(new_info, pair.new_adapter, task, hooks, seed=request.seed)
        task_format = TaskFormat(task, pair.old_base.tokenizer, new_info.kind)
        features = task_format.encode(task.split(request.split))
        grid = alpha_grid(request.points)
        losses: list[float] = []
        metrics: list[float] = []
        if request.mode == "adapter" and _sweep_batchable(end_a, end_b, task):
            hooks.check_cancel()
            batched = interpolation_model(end_a.model, end_b.model, grid)  # type: ignore[arg-type]
            if device.type == "cuda":
                batched.cast_frozen_linears(torch.bfloat16)
                batched.use_fast_attention()
            batched.to(device)
            results = evaluate_slots(batched, task_format, features, split=request.split, device=device)
            for index, (alpha, result) in enumerate(zip(grid, results)):
                meter.add_tokens(result.tokens)
                losses.append(result.score.loss)
                metrics.append(result.score.primary)
                hooks.report(Progress("interpolate", index + 1, len(grid), {"alpha": alpha, "metric": metrics[-1]}, None))
        elif end_a.peft_type == "PROMPT_TUNING" or end_b.peft_type == "PROMPT_TUNING":
            if end_a.peft_type != end_b.peft_type:
                raise ConfigError("both adapters must be prompt tuning to interpolate prompts", field="peft_type")
            live, state_a, state_b = end_b.model, _state(end_a.model), _state(end_b.model)
        else:
            live, state_b = _merged_parameters(end_b)
            _, state_a = _merged_parameters(end_a)
            del end_a, end_b
        if not losses:
            _sequential_sweep(live, state_a, state_b, task_format, features, grid, request.split, device, hooks, meter,
                              losses, metrics)
    interpolation = interpolation_metrics(
        request.mode, request.split, grid, losses, metrics,
        "accuracy" if task.kind == "classification" else "exact_match",
    )
    return _new_report(
        "interpolation",
        TrainingConfig(seed=request.seed, device=request.device),
        device,
        job_id=request.job_id,
        peft_type=pair.new_adapter.peft_type,
        hyperparameters={"mode": request.mode, "points": request.points, "split": request.split},
        fingerprints=pair.fingerprints(),
        metrics=Metrics(interpolation=interpolation),
        cost=meter.stop(),
    )


def _sweep_batchable(end_a: AdaptedModel, end_b: AdaptedModel, task: TaskData) -> bool:
    """Adapter-mode sweeps of two LoRA adapters of a classification task run as one batched pass."""
    if task.kind != "classification" or not (end_a.is_peft and end_b.is_peft):
        return False
    return batching_obstacle([end_a.model, end_b.model], ["shared", "shared"]) is None


def _sequential_sweep(
    live: torch.nn.Module,
    state_a: dict[str, torch.Tensor],
    state_b: dict[str, torch.Tensor],
    task_format: TaskFormat,
    features: list[Feature],
    grid: list[float],
    split: str,
    device: torch.device,
    hooks: RunHooks,
    meter: CostMeter,
    losses: list[float],
    metrics: list[float],
) -> None:
    """One model in memory, its weights lerped in place for every α (no reload from disk)."""
    live.to(device)
    targets = {k: v for k, v in live.state_dict().items() if torch.is_floating_point(v)}
    float_a = {k: state_a[k].to(device) for k in targets}
    float_b = {k: state_b[k].to(device) for k in targets}
    for index, alpha in enumerate(grid):
        hooks.check_cancel()
        lerp_into_(targets, float_a, float_b, alpha)
        result = evaluate(live, task_format, features, split=split, device=device)
        meter.add_tokens(result.tokens)
        losses.append(result.score.loss)
        metrics.append(result.score.primary)
        hooks.report(Progress("interpolate", index + 1, len(grid), {"alpha": alpha, "metric": metrics[-1]}, None))


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


# ---------------------------------------------------------------------------- similarity
@dataclass(frozen=True)
class SimilarityRequest:
    """Functional similarity of the attention heads of the old and the new adapted model."""

    old_base_dir: Path
    old_adapter_dir: Path
    new_base_dir: Path
    new_adapter_dir: Path
    task_dir: Path
    probes: int = 32
    batch_size: int = 16
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    job_id: str | None = None


def attention_similarity(request: SimilarityRequest, hooks: RunHooks | None = None) -> Report:
    """Cosine of corresponding heads' attention maps on probe inputs, with the chance level."""
    hooks = hooks or RunHooks()
    device = resolve_device(request.device)
    meter = CostMeter(device)
    meter.start()
    accumulator = AttentionSimilarityAccumulator()
    with ExitStack() as stack:
        pair = _load_pair(
            request.old_base_dir, request.old_adapter_dir, request.new_base_dir, request.new_adapter_dir,
            request.task_dir, seed=request.seed, hooks=hooks, workspace=_Workspace(stack),
            old_adapter_on_new_base=False,
        )
        task, old_base = pair.task, pair.old_base
        model_a = attach_adapter(old_base, pair.old_adapter, trainable=False).merged_model().to(device).eval()
        model_b = _load_adapted(pair.new_info, pair.new_adapter, task, hooks, seed=request.seed)
        model_b = model_b.merged_model().to(device).eval()
        task_format = TaskFormat(task, old_base.tokenizer, pair.new_info.kind)
        probes = task_format.encode(task.test[: request.probes])
        with torch.no_grad():
            for batch in task_format.batches(probes, request.batch_size, device):
                hooks.check_cancel()
                with autocast_context(device):
                    maps_a = model_a(input_ids=batch.input_ids, attention_mask=batch.attention_mask, output_attentions=True).attentions
                    maps_b = model_b(input_ids=batch.input_ids, attention_mask=batch.attention_mask, output_attentions=True).attentions
                accumulator.add([m.float() for m in maps_a], [m.float() for m in maps_b], batch.attention_mask)
                meter.add_tokens(2 * batch.tokens)
    return _new_report(
        "similarity",
        TrainingConfig(seed=request.seed, device=request.device),
        device,
        job_id=request.job_id,
        peft_type=pair.new_adapter.peft_type,
        hyperparameters={"probes": request.probes},
        fingerprints=pair.fingerprints(),
        metrics=Metrics(similarity=accumulator.result()),
        cost=meter.stop(),
    )


__all__ = [
    "TRAINABLE_PEFT_NAMES",
    "CompatibilityRequest",
    "InterpolationRequest",
    "RecycleRequest",
    "SimilarityRequest",
    "TrainRequest",
    "adapter_options_like",
    "attention_similarity",
    "compatibility_report",
    "interpolate",
    "recycle_adapter",
    "train_adapter",
]
