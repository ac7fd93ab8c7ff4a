"""The measurements of the performance benchmark; each returns a JSON-ready dict.

Ours is always the service's own code path (recycling_core's trainer, teacher and interpolation);
the baseline is a plain hand-written PEFT loop. Both run in the same process on the same card,
one after the other, with the same model weights, LoRA config, batches, seed and steps.
"""

from __future__ import annotations

import copy
import gc
import time
from collections.abc import Callable
from dataclasses import replace

import torch
from peft import LoraConfig, TaskType, get_peft_model

from bench.perf.setups import (
    Setup,
    adapted,
    batch_order,
    build_model,
    member,
    synthetic_features,
    task_format,
)
from recycling_core.batched_training import BatchedLoraTrainer, train_members
from recycling_core.metrics import alphas as alpha_grid
from recycling_core.metrics import lerp_into_
from recycling_core.multilora import cast_frozen_linears, interpolation_model
from recycling_core.pipeline import frozen_teacher
from recycling_core.tasking import autocast_context, evaluate, evaluate_slots
from recycling_core.training import Progress, RunHooks

MODEL_SEED = 1234


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def measured_matmul_tflops(device: torch.device, size: int = 8192, repeats: int = 20) -> float | None:
    """The card's bf16 dense matrix-product rate (random 8192³ products, after warm-up)."""
    if device.type != "cuda":
        return None
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync(device)
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    sync(device)
    elapsed = time.perf_counter() - started
    return 2 * size**3 * repeats / elapsed / 1e12


def flops_per_token(setup: Setup, model: torch.nn.Module) -> dict[str, float]:
    """LoRA training FLOPs per token (the formula the doc prints).

    Frozen linear weights (N_lin, LM head / classifier included, embeddings excluded): 2·N_lin
    forward + 2·N_lin backward (input gradients only, no weight gradients). LoRA weights (N_lora):
    6·N_lora. Attention score and value products: 4·L·s·d forward, 8·L·s·d backward (full s, no
    causal halving) → 4·N_lin + 6·N_lora + 12·L·s·d.
    """
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    lora = sum(
        setup.lora_rank * (m.in_features + m.out_features)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and name.rsplit(".", 1)[-1] in setup.targets
    )
    config = setup.model_config()
    layers, hidden = config.num_hidden_layers, config.hidden_size
    attention = 12 * layers * setup.seq * hidden
    return {"linear_params": linear, "lora_params": lora, "flops_per_token": 4 * linear + 6 * lora + attention}


class StepClock:
    """Progress hook: a synchronised timestamp after every optimizer step."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stamps: dict[int, float] = {}

    def __call__(self, progress: Progress) -> None:
        if progress.step > 0:
            sync(self.device)
            self.stamps[progress.step] = time.perf_counter()


def window_rate(stamps: dict[int, float], first: int, last: int, tokens_per_step: int) -> dict[str, float]:
    seconds = stamps[last] - stamps[first]
    steps = last - first
    return {"step_seconds": seconds / steps, "tokens_per_second": tokens_per_step * steps / seconds}


# ---------------------------------------------------------------------------- 1. one job
def baseline_loop(setup: Setup, device: torch.device, steps: int, seed: int = 0) -> dict:
    """What a careful user writes: PEFT LoRA, bf16 autocast, fused AdamW, loss.item() each step."""
    features = synthetic_features(setup, setup.batch * 8, seed)
    order = batch_order(features, setup, seed, steps)
    model = build_model(setup, MODEL_SEED, device)
    torch.manual_seed(seed)
    peft_config = LoraConfig(
        task_type=TaskType.SEQ_CLS if setup.kind == "encoder" else TaskType.CAUSAL_LM,
        r=setup.lora_rank, lora_alpha=setup.lora_alpha, lora_dropout=0.0, target_modules=list(setup.targets),
    )  # fmt: skip
    model = get_peft_model(model, peft_config)
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=1e-3, fused=device.type == "cuda"
    )
    model.train()
    losses, stamps = [], {}
    for step, indices in enumerate(order, start=1):
        ids = torch.tensor([features[i].input_ids for i in indices], device=device)
        mask = torch.ones_like(ids)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            if setup.kind == "encoder":
                labels = torch.tensor([features[i].class_id for i in indices], device=device)
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            else:
                loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        sync(device)
        stamps[step] = time.perf_counter()
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else 0
    del model, optimizer
    free_memory()
    return {"losses": losses, "stamps": stamps, "peak_memory_bytes": peak}


def ours_job(setup: Setup, device: torch.device, steps: int, seed: int = 0, compile_model: bool = False) -> dict:
    """One fresh/init job's training through recycling_core (the service's path)."""
    clock = StepClock(device)
    model = build_model(setup, MODEL_SEED, device)
    job = member(setup, model, seed, steps, device.type, copy_base=False, hooks=RunHooks(progress=clock))
    job.config = replace(job.config, learning_rate=1e-3)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    result = BatchedLoraTrainer([job], compile_model=compile_model).run()[0]
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else 0
    losses = [loss for _, loss in result.curve.train_loss]
    del job, model
    free_memory()
    return {"losses": losses, "stamps": clock.stamps, "peak_memory_bytes": peak}


def one_job(setup: Setup, device: torch.device, matmul_tflops: float | None) -> dict:
    steps = setup.steps
    tokens = setup.batch * setup.seq
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    baseline = baseline_loop(setup, device, steps)
    ours = ours_job(setup, device, steps)
    first, last = setup.warmup_steps, steps - 1  # the last step of ours ends with the final evaluation
    base_rate = window_rate(baseline["stamps"], first, last, tokens)
    our_rate = window_rate(ours["stamps"], first, last, tokens)
    probe = build_model(setup, MODEL_SEED, torch.device("meta"))
    flops = flops_per_token(setup, probe)
    del probe
    result = {
        "setup": setup.name,
        "seq": setup.seq,
        "batch": setup.batch,
        "steps": steps,
        "timed_steps": f"{first}..{last}",
        "baseline": {**base_rate, "peak_memory_bytes": baseline["peak_memory_bytes"]},
        "ours": {**our_rate, "peak_memory_bytes": ours["peak_memory_bytes"]},
        "speedup": our_rate["tokens_per_second"] / base_rate["tokens_per_second"],
        "flops": flops,
        "loss": {
            "baseline_first_last": [baseline["losses"][0], baseline["losses"][-1]],
            "ours_first_last": [ours["losses"][0], ours["losses"][-1]],
            "final_relative_difference": abs(ours["losses"][-1] - baseline["losses"][-1]) / abs(baseline["losses"][-1]),
            "max_step_relative_difference": max(
                abs(a - b) / abs(b) for a, b in zip(ours["losses"], baseline["losses"])
            ),
            "baseline_curve": baseline["losses"],
            "ours_curve": ours["losses"],
        },
    }
    if device.type == "cuda":
        try:
            compiled = ours_job(setup, device, steps, compile_model=True)
            compiled_rate = window_rate(compiled["stamps"], first, last, tokens)
            result["ours_compiled"] = {**compiled_rate, "peak_memory_bytes": compiled["peak_memory_bytes"],
                                       "final_loss": compiled["losses"][-1]}
            result["speedup_compiled"] = compiled_rate["tokens_per_second"] / base_rate["tokens_per_second"]
        except Exception as error:  # compilation is an option; its failure is a finding, not a stop
            result["ours_compiled"] = {"error": f"{type(error).__name__}: {error}"[:2000]}
        free_memory()
    if matmul_tflops:
        for side in ("baseline", "ours", "ours_compiled"):
            if "tokens_per_second" not in result.get(side, {}):
                continue
            achieved = result[side]["tokens_per_second"] * flops["flops_per_token"] / 1e12
            result[side]["achieved_tflops"] = achieved
            result[side]["mfu"] = achieved / matmul_tflops
    return result


# ---------------------------------------------------------------------------- 2. distillation
def distillation(setup: Setup, device: torch.device) -> dict:
    """Share of a distill step spent in the frozen teacher's forward."""
    steps = setup.steps
    tokens = setup.batch * setup.seq
    first, last = setup.warmup_steps, steps - 1

    def run(teacher_cache: bool | None) -> tuple[dict, object]:
        clock = StepClock(device)
        model = build_model(setup, MODEL_SEED, device)
        job = member(setup, model, 0, steps, device.type, copy_base=False, hooks=RunHooks(progress=clock))
        teacher = None
        if teacher_cache is not None:
            teacher_model = build_model(setup, MODEL_SEED + 1, device)
            teacher = frozen_teacher(adapted(setup, teacher_model, 7), job.task_format, device, cache=teacher_cache)
            job.teacher = teacher
        train_members([job])
        rate = window_rate(clock.stamps, first, last, tokens)
        del job, model
        free_memory()
        return rate, teacher

    plain, _ = run(None)
    distill, teacher = run(False)
    # the teacher's forward alone, over the same kind of batches
    formatter = task_format(setup)
    features = synthetic_features(setup, setup.batch * 8, 0)
    batches = [formatter.collate(features[i : i + setup.batch], device) for i in range(0, len(features), setup.batch)]
    with autocast_context(device):
        for batch in batches[:2]:
            teacher(batch, False)  # type: ignore[misc]
        sync(device)
        started = time.perf_counter()
        for index in range(steps):
            teacher(batches[index % len(batches)], False)  # type: ignore[misc]
        sync(device)
    teacher_seconds = (time.perf_counter() - started) / steps
    del teacher
    free_memory()
    result = {
        "setup": setup.name,
        "step_seconds_without_teacher": plain["step_seconds"],
        "distill_step_seconds": distill["step_seconds"],
        "teacher_forward_seconds": teacher_seconds,
        "teacher_share_of_step_measured_alone": teacher_seconds / distill["step_seconds"],
        "teacher_share_of_step_by_difference": (distill["step_seconds"] - plain["step_seconds"]) / distill["step_seconds"],
    }
    if setup.kind == "encoder":
        cached, cached_teacher = run(True)
        result["cached_distill_step_seconds"] = cached["step_seconds"]
        result["cached_teacher_share_by_difference"] = (cached["step_seconds"] - plain["step_seconds"]) / cached["step_seconds"]
        result["cache_hits_misses"] = [cached_teacher.hits, cached_teacher.misses]  # type: ignore[union-attr]
    return result


# ---------------------------------------------------------------------------- 3. campaign batching
def campaign_batching(setup: Setup, device: torch.device, adapters: int = 8, compile_model: bool = False) -> dict:
    """N adapters of one base: one batched pass versus N sequential jobs; curves compared.

    Wall time covers each whole training call (evaluations at the start and the end included);
    the steady-state rate compares step times over the timed window, without start-up and
    compilation.
    """
    steps = setup.steps
    first, last = setup.warmup_steps, steps - 1
    base = build_model(setup, MODEL_SEED, device)
    sequential_curves, sequential_seconds, sequential_step_seconds = [], 0.0, 0.0
    for seed in range(adapters):
        clock = StepClock(device)
        job = member(setup, base, seed, steps, device.type, hooks=RunHooks(progress=clock, compile_model=compile_model))
        seconds, (result,) = _timed(device, lambda job=job: train_members([job]))
        sequential_seconds += seconds
        sequential_step_seconds += window_rate(clock.stamps, first, last, 1)["step_seconds"]
        sequential_curves.append([loss for _, loss in result.curve.train_loss])
        del job
        free_memory()
    clock = StepClock(device)
    jobs = [
        member(setup, base, seed, steps, device.type,
               hooks=RunHooks(progress=clock if seed == 0 else None, compile_model=compile_model))
        for seed in range(adapters)
    ]  # fmt: skip
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    batched_seconds, results = _timed(device, lambda: train_members(jobs))
    batched_step_seconds = window_rate(clock.stamps, first, last, 1)["step_seconds"]
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else 0
    batched_curves = [[loss for _, loss in r.curve.train_loss] for r in results]
    differences = [
        max(abs(a - b) / abs(b) for a, b in zip(mine, alone)) for mine, alone in zip(batched_curves, sequential_curves)
    ]
    final = [abs(m[-1] - a[-1]) / abs(a[-1]) for m, a in zip(batched_curves, sequential_curves)]
    del jobs, base
    free_memory()
    return {
        "setup": setup.name,
        "adapters": adapters,
        "steps": steps,
        "compiled": compile_model,
        "sequential_seconds": sequential_seconds,
        "batched_seconds": batched_seconds,
        "speedup": sequential_seconds / batched_seconds,
        "sequential_step_seconds_sum": sequential_step_seconds,
        "batched_step_seconds": batched_step_seconds,
        "steady_state_speedup": sequential_step_seconds / batched_step_seconds,
        "batched_peak_memory_bytes": peak,
        "max_step_relative_loss_difference": max(differences),
        "max_final_relative_loss_difference": max(final),
        "batched_with": results[0].extra.get("batched_with"),
    }


# ---------------------------------------------------------------------------- 4. interpolation
def _timed(device: torch.device, function: Callable[[], object]) -> tuple[float, object]:
    sync(device)
    started = time.perf_counter()
    value = function()
    sync(device)
    return time.perf_counter() - started, value


def _adapter_sweep(model_a, model_b, grid, formatter, features, device: torch.device, batch_size: int = 64):
    """Every point of an adapter-mode sweep as a slot of one multi-LoRA model, one evaluation."""
    batched = interpolation_model(model_a, model_b, grid)
    if device.type == "cuda":
        batched.cast_frozen_linears(torch.bfloat16)
    batched.to(device)
    return evaluate_slots(batched, formatter, features, split="dev", batch_size=batch_size, device=device)


def interpolation(setup: Setup, device: torch.device, points: int = 11, examples: int = 512) -> dict:
    """An adapter-mode sweep in one batched pass versus one evaluation pass; model mode in memory."""
    formatter = task_format(setup)
    features = synthetic_features(setup, examples, 99)
    base = build_model(setup, MODEL_SEED, device)
    end_a, end_b = adapted(setup, copy.deepcopy(base), 1), adapted(setup, copy.deepcopy(base), 2)
    with torch.no_grad():
        for model in (end_a.model, end_b.model):
            for name, parameter in model.named_parameters():
                if "lora_B" in name:
                    parameter.normal_(0.0, 0.02)
    grid = alpha_grid(points)
    evaluate_batch = 64

    def one_pass_peft():
        return evaluate(end_b.model, formatter, features, split="dev", batch_size=evaluate_batch, device=device)

    merged = end_b.merged_model()
    if device.type == "cuda":
        cast_frozen_linears(merged, torch.bfloat16)

    def one_pass_merged():
        return evaluate(merged, formatter, features, split="dev", batch_size=evaluate_batch, device=device)

    def sweep():
        return _adapter_sweep(end_a.model, end_b.model, grid, formatter, features, device, evaluate_batch)

    for function in (one_pass_peft, one_pass_merged, sweep):
        function()  # warm-up
    peft_seconds, _ = _timed(device, one_pass_peft)
    merged_seconds, _ = _timed(device, one_pass_merged)
    sweep_seconds, results = _timed(device, sweep)
    single = min(peft_seconds, merged_seconds)

    # model mode: M0⊕A ↔ M1⊕B, lerped in place on the device for every point
    other = build_model(setup, MODEL_SEED + 1, device)
    end_old = adapted(setup, other, 3)
    state_a = {k: v.detach().clone() for k, v in end_old.merged_model().state_dict().items()}
    live = end_b.merged_model()
    state_b = {k: v.detach().clone() for k, v in live.state_dict().items()}
    targets = {k: v for k, v in live.state_dict().items() if torch.is_floating_point(v)}

    def model_sweep():
        lerp_seconds = 0.0
        for alpha in grid:
            seconds, _ = _timed(device, lambda alpha=alpha: lerp_into_(targets, state_a, state_b, alpha))
            lerp_seconds += seconds
            evaluate(live, formatter, features, split="dev", batch_size=evaluate_batch, device=device)
        return lerp_seconds

    model_seconds, lerp_seconds = _timed(device, model_sweep)
    return {
        "setup": setup.name,
        "points": points,
        "examples": examples,
        "eval_batch": evaluate_batch,
        "single_pass_seconds_peft": peft_seconds,
        "single_pass_seconds_merged_bf16": merged_seconds,
        "adapter_sweep_seconds": sweep_seconds,
        "adapter_sweep_over_single_pass": sweep_seconds / single,
        "adapter_sweep_accuracies": [r.score.primary for r in results],  # type: ignore[union-attr]
        "model_sweep_seconds": model_seconds,
        "model_sweep_lerp_seconds": lerp_seconds,
        "model_sweep_over_single_pass": model_seconds / single,
    }


# ---------------------------------------------------------------------------- profile
def profiled(device: torch.device, work: Callable[[], object]) -> dict:
    """Run ``work`` under the torch profiler; the device-time table and a summary by kind."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as profiler:
        work()
    events = profiler.key_averages()
    sort_key = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    try:
        table = events.table(sort_by=sort_key, row_limit=30)
    except Exception:  # the attribute was renamed across torch versions
        table = events.table(sort_by="device_time_total" if device.type == "cuda" else "cpu_time_total", row_limit=30)
    kernels: dict[str, float] = {}
    for event in events:
        if device.type == "cuda" and getattr(event, "device_type", None) is not None and "CUDA" not in str(event.device_type):
            continue  # operator rows; their kernels are counted as kernel rows
        self_time = getattr(event, "self_device_time_total", None)
        if self_time is None:
            self_time = getattr(event, "self_cuda_time_total", 0.0)
        if device.type != "cuda":
            self_time = event.self_cpu_time_total
        if self_time:
            kind = _category(event.key)
            kernels[kind] = kernels.get(kind, 0.0) + self_time / 1e6
    return {"kernel_seconds_by_kind": kernels, "table": table}


def profile_job(setup: Setup, device: torch.device, steps: int = 6) -> dict:
    """Where the time of one job goes (torch profiler over a few steps of ours)."""
    return {"setup": setup.name, "steps": steps, **profiled(device, lambda: ours_job(setup, device, steps))}


def profile_batched(setup: Setup, device: torch.device, adapters: int = 8, steps: int = 6) -> dict:
    """Where the time of a batched pass of 8 adapters goes (model built before profiling)."""
    base = build_model(setup, MODEL_SEED, device)
    jobs = [member(setup, base, seed, steps, device.type) for seed in range(adapters)]
    result = {"setup": setup.name, "adapters": adapters, "steps": steps, **profiled(device, lambda: train_members(jobs))}
    return result


def profile_batching(setup: Setup, device: torch.device, adapters: int = 8, steps: int = 6) -> dict:
    """Where the time goes in one job and in a batched pass of N jobs, with the same profiler.

    Both runs are eager (as batched passes run in the service), after a 2-step warm-up. N is
    ``adapters`` unless N times the single job's peak memory would not fit 85% of the card; then
    the largest power of two that fits (recorded as ``batched.adapters``).
    """
    base = build_model(setup, MODEL_SEED, device)
    train_members([member(setup, base, 0, 2, device.type)])
    free_memory()
    single_job = member(setup, base, 0, steps, device.type)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    single = profiled(device, lambda: train_members([single_job]))
    single["peak_memory_bytes"] = torch.cuda.max_memory_allocated() if device.type == "cuda" else 0
    del single_job
    free_memory()
    fitting = adapters
    if device.type == "cuda":
        capacity = 0.85 * torch.cuda.get_device_properties(device).total_memory
        while fitting > 1 and single["peak_memory_bytes"] * fitting > capacity:
            fitting //= 2
    jobs = [member(setup, base, seed, steps, device.type) for seed in range(fitting)]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    batched = profiled(device, lambda: train_members(jobs))
    batched["peak_memory_bytes"] = torch.cuda.max_memory_allocated() if device.type == "cuda" else 0
    batched["adapters"] = fitting
    del jobs, base
    free_memory()
    single_total = sum(single["kernel_seconds_by_kind"].values())
    batched_total = sum(batched["kernel_seconds_by_kind"].values())
    return {
        "setup": setup.name,
        "steps": steps,
        "single": single,
        "batched": batched,
        "device_seconds_single": single_total,
        "device_seconds_batched": batched_total,
        "device_time_ratio_n_singles_over_batched": fitting * single_total / batched_total if batched_total else None,
    }


def profile_sweep(setup: Setup, device: torch.device, points: int = 11, examples: int = 512) -> dict:
    """Where the time of an 11-point adapter-mode sweep goes."""
    formatter = task_format(setup)
    features = synthetic_features(setup, examples, 99)
    base = build_model(setup, MODEL_SEED, device)
    end_a, end_b = adapted(setup, copy.deepcopy(base), 1), adapted(setup, copy.deepcopy(base), 2)
    grid = alpha_grid(points)

    def sweep():
        return _adapter_sweep(end_a.model, end_b.model, grid, formatter, features, device)

    sweep()  # warm-up
    result = {"setup": setup.name, "points": points, **profiled(device, sweep)}
    return result


def _category(name: str) -> str:
    lowered = name.lower()
    if any(token in lowered for token in ("gemm", "matmul", "addmm", "bmm", "mm_", "cutlass", "sm90", "nvjet", "xmma")):
        return "matrix products"
    if any(token in lowered for token in ("flash", "attention", "fmha", "sdpa")):
        return "attention"
    if "adam" in lowered or "foreach" in lowered:
        return "optimizer"
    if any(token in lowered for token in ("memcpy", "memset", "copy")):
        return "copies"
    if any(token in lowered for token in ("elementwise", "vectorized", "reduce", "norm", "softmax", "cross_entropy",
                                          "nll", "cast", "fill", "index", "cat")):
        return "element-wise and reductions"
    return "other"
