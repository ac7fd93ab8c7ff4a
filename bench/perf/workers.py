"""Measurements that need worker processes: warm-worker start-up and a campaign over two GPUs.

* ``warm``: a fresh process (like a worker that just started) runs two train jobs on the same
  base model directory through ``recycling_core.pipeline.train_adapter`` with the worker's
  ``BaseModelCache`` (on the GPU); the time from each job's start to its first optimizer step.
* ``campaign``: worker processes, one per GPU, each started and warmed up first (imports, CUDA
  context, the base model built), as the service's long-lived workers are; the clock starts when
  the adapters are handed out and stops when the last worker is done. Each worker trains its
  adapters in batched passes of up to 8, as the service's worker does.
"""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import time
from pathlib import Path

import torch

from recycling_core.training import RunHooks

BATCH_LIMIT = 8


def make_warm_inputs(root: Path, quick: bool) -> tuple[Path, Path]:
    """A base model directory (TinyLlama-1.1B's shape, small vocabulary) and a classification task."""
    from recycling_core.tiny import make_synthetic_task, make_tiny_model

    shape = (
        dict(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128, num_key_value_heads=2)
        if quick
        else dict(hidden_size=2048, num_layers=22, num_heads=32, intermediate_size=5632, num_key_value_heads=4)
    )
    base = make_tiny_model(root / "base", kind="causal", seed=0, max_position_embeddings=2048, **shape)
    task = make_synthetic_task(root / "task", n_train=64, n_dev=16, n_test=16, seed=0)
    return base, task


def warm_jobs(base: Path, task: Path, out: Path, device: str) -> dict:
    """Two jobs in this (fresh) process; seconds from each job's start to its first step."""
    from recycling_core.models import BaseModelCache
    from recycling_core.pipeline import TrainRequest, train_adapter
    from recycling_core.training import TrainingConfig

    cache = BaseModelCache(device="cuda" if device == "cuda" else None)
    timings = []
    for index in range(2):
        started = time.perf_counter()
        first_step: list[float] = []

        def progress(update, first_step=first_step, started=started):
            if update.step >= 1 and not first_step:
                first_step.append(time.perf_counter() - started)

        config = TrainingConfig(steps=2, eval_every=2, batch_size=8, max_length=64, device=device)  # type: ignore[arg-type]
        train_adapter(TrainRequest(base, task, out / f"job{index}", training=config), RunHooks(progress=progress, cache=cache))
        timings.append({"first_step_seconds": first_step[0], "job_seconds": time.perf_counter() - started})
    return {
        "first_job": timings[0],
        "second_job": timings[1],
        "speedup_to_first_step": timings[0]["first_step_seconds"] / timings[1]["first_step_seconds"],
        "cache_hits_misses": [cache.hits, cache.misses],
    }


def warm(root: Path, quick: bool, device: str) -> dict:
    base, task = make_warm_inputs(root, quick)
    command = [sys.executable, "-m", "bench.perf.workers", "warm", str(base), str(task), str(root / "out"), device]
    finished = subprocess.run(command, capture_output=True, text=True, check=False)
    if finished.returncode != 0:
        raise RuntimeError(finished.stderr[-3000:])
    return json.loads(finished.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------- campaign over GPUs
def _campaign_worker(gpu: int, setup_name: str, quick: bool, seeds: list[int], steps: int, go, done) -> None:
    from bench.perf.setups import QUICK_SETUPS, SETUPS, build_model, member
    from recycling_core.batched_training import train_members

    setup = (QUICK_SETUPS if quick else SETUPS)[setup_name]
    device = torch.device("cpu")
    if torch.cuda.is_available():
        torch.cuda.set_device(gpu)
        device = torch.device("cuda", gpu)
    base = build_model(setup, 1234, device)
    warm_up = member(setup, base, 999, 2, device.type)
    train_members([warm_up])
    del warm_up
    done.put(("ready", gpu, 0.0))
    go.wait()
    started = time.perf_counter()
    for first in range(0, len(seeds), BATCH_LIMIT):
        group = [member(setup, base, seed, steps, device.type) for seed in seeds[first : first + BATCH_LIMIT]]
        train_members(group)
        del group
    if device.type == "cuda":
        torch.cuda.synchronize()
    done.put(("done", gpu, time.perf_counter() - started))


def campaign(setup_name: str, gpus: int, adapters: int, steps: int, quick: bool) -> float:
    """Wall seconds for ``adapters`` adapters spread over ``gpus`` warm worker processes."""
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    done = context.Queue()
    shares = [list(range(adapters))[index::gpus] for index in range(gpus)]
    processes = [
        context.Process(target=_campaign_worker, args=(gpu, setup_name, quick, shares[gpu], steps, go, done))
        for gpu in range(gpus)
    ]
    for process in processes:
        process.start()
    for _ in processes:
        kind, _, _ = done.get(timeout=900)
        assert kind == "ready"
    started = time.perf_counter()
    go.set()
    for _ in processes:
        kind, _, _ = done.get(timeout=1800)
        assert kind == "done"
    seconds = time.perf_counter() - started
    for process in processes:
        process.join(timeout=60)
    return seconds


def two_gpu_campaign(setup_name: str, adapters: int, steps: int, quick: bool) -> dict:
    available = torch.cuda.device_count()
    if available < 2 and not quick:
        return {"skipped": f"{available} GPU(s) visible; this measurement needs 2"}
    one = campaign(setup_name, 1, adapters, steps, quick)
    two = campaign(setup_name, 2, adapters, steps, quick)
    return {
        "setup": setup_name,
        "adapters": adapters,
        "steps": steps,
        "one_gpu_seconds": one,
        "two_gpu_seconds": two,
        "speedup": one / two,
        "gpus_visible": available,
    }


if __name__ == "__main__":
    if sys.argv[1] == "warm":
        base_dir, task_dir, out_dir, device_name = sys.argv[2:6]
        print(json.dumps(warm_jobs(Path(base_dir), Path(task_dir), Path(out_dir), device_name)))
