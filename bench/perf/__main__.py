"""``python -m bench.perf --out DIR``: the performance benchmark of docs/benchmarks/performance.md.

Parts (``--only`` picks some): ``matmul`` (the card's bf16 rate, for MFU), ``job`` (one recycling
job, ours vs a hand-written PEFT loop, per model), ``distill`` (the teacher's share of a step),
``batching`` (8 adapters in one pass vs 8 sequential jobs), ``interpolation`` (11-point sweeps),
``warm`` (second job's time to first step), ``gpus`` (a 16-adapter campaign on 1 vs 2 GPUs),
``profile`` (where one job's time goes), ``profile-limits`` and ``profile-batching`` (profiles of
what limits targets 3 and 4: one job next to a batched pass of 8, same profiler). Results go to ``DIR/perf.json`` after every part (a
part that fails records its error and the rest go on) and the profile table to
``DIR/profile.txt``. ``--quick`` runs tiny models for a CPU smoke test; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

from bench.perf import runs, workers
from bench.perf.setups import QUICK_SETUPS, SETUPS

PARTS = ("matmul", "job", "distill", "batching", "interpolation", "warm", "gpus", "profile", "profile-limits", "profile-batching")


def machine() -> dict:
    info = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
    }
    for name in ("transformers", "peft"):
        info[name] = __import__(name).__version__
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["cuda"] = torch.version.cuda
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*", choices=PARTS, default=list(PARTS))
    parser.add_argument("--setups", nargs="*", default=list(SETUPS))
    parser.add_argument("--quick", action="store_true", help="tiny models on any device (a smoke test)")
    parser.add_argument("--campaign-steps", type=int, default=150)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    setups = QUICK_SETUPS if args.quick else SETUPS
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    results: dict = {"command": " ".join(["python -m bench.perf", *(argv or sys.argv[1:])]), "machine": machine(),
                     "quick": args.quick, "parts": {}}
    path = args.out / "perf.json"

    def record(part: str, function) -> None:
        started = time.perf_counter()
        print(f"[perf] {part} ...", flush=True)
        try:
            value = function()
        except Exception as error:  # one failed part must not lose the others
            value = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-4000:]}
        if isinstance(value, dict):
            value["wall_seconds"] = time.perf_counter() - started
        results["parts"][part] = value
        runs.free_memory()
        path.write_text(json.dumps(results, indent=2, default=str))
        print(f"[perf] {part}: {json.dumps(value, default=str)[:1500]}", flush=True)

    matmul = None
    if "matmul" in args.only:
        record("matmul", lambda: {"bf16_tflops": runs.measured_matmul_tflops(device)})
        matmul = results["parts"]["matmul"].get("bf16_tflops")
    if "job" in args.only:
        for name in args.setups:
            record(f"job/{name}", lambda name=name: runs.one_job(setups[name], device, matmul))
    if "distill" in args.only:
        for name in ("bert-base", "smollm2-135m"):
            record(f"distill/{name}", lambda name=name: runs.distillation(setups[name], device))
    batching_setups = [name for name in ("bert-base", "smollm2-135m") if name in args.setups]
    if "batching" in args.only:
        for name in batching_setups:
            record(f"batching/{name}", lambda name=name: runs.campaign_batching(setups[name], device))
            if device.type == "cuda" and name == "bert-base":
                record(f"batching-compiled/{name}",
                       lambda name=name: runs.campaign_batching(setups[name], device, compile_model=True))
    if "interpolation" in args.only:
        record("interpolation/bert-base", lambda: runs.interpolation(setups["bert-base"], device))
    if "warm" in args.only:
        with tempfile.TemporaryDirectory(prefix="perf-warm-") as root:
            record("warm", lambda: workers.warm(Path(root), args.quick, device.type))
    if "gpus" in args.only:
        record("gpus", lambda: workers.two_gpu_campaign("bert-base", 16, 4 if args.quick else args.campaign_steps, args.quick))
    def table_saved(value: dict, filename: str) -> dict:
        """The profiler's table goes to its own file, the rest into perf.json."""
        (args.out / filename).write_text(value.pop("table"))
        return value

    if "profile" in args.only:
        record("profile/tinyllama-1.1b",
               lambda: table_saved(runs.profile_job(setups["tinyllama-1.1b"], device), "profile.txt"))
    if "profile-limits" in args.only:
        record("profile/batched-smollm2-135m",
               lambda: table_saved(runs.profile_batched(setups["smollm2-135m"], device), "profile-batched-smollm2.txt"))
        record("profile/sweep-bert-base",
               lambda: table_saved(runs.profile_sweep(setups["bert-base"], device), "profile-sweep-bert.txt"))
    if "profile-batching" in args.only:
        for name in batching_setups:
            def batching_profile(name=name):
                value = runs.profile_batching(setups[name], device)
                table_saved(value["single"], f"profile-batching-{name}-single.txt")
                table_saved(value["batched"], f"profile-batching-{name}-batched.txt")
                return value
            record(f"profile-batching/{name}", batching_profile)
    failed = [part for part, value in results["parts"].items() if isinstance(value, dict) and "error" in value]
    print(f"[perf] wrote {path}; failed parts: {failed or 'none'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
