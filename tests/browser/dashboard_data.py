"""Real data for the dashboard: the demo's tiny upgrade story, run by the real worker.

Files follow ``recycle demo``'s recipe (``app.demo``), smaller: a tiny BERT pre-trained on
domain a (v1), a synthetic topic task, and v2 continually pre-trained on domain b. Everything
else goes through the HTTP API (``RecycleClient``), as a platform would do it: an adapter trained
on v1 by a service job, a policy (init and distill, fresh baseline, no promotion as is), v2
registered with its parent (the campaign starts by itself), an attention-similarity job on the
result, and a version of another architecture whose compatibility job fails (a recent failure).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.client import RecycleClient

MODEL = "tiny-bert"
TASK = "topics"
TRAINING = {"learning_rate": 0.005, "eval_every": 10, "max_length": 64}
POLICY = {
    "methods": ["init", "distill"],
    "step_budget": 80,
    "fresh_baseline": True,
    "gates": {"direct_min_retention": None},
    "training": TRAINING,
}


@dataclass
class StoryFiles:
    v1: Path
    v2: Path
    task: Path
    wide: Path
    """A tiny encoder of another width: the v1 adapter cannot fit it."""


def make_files(root: Path) -> StoryFiles:
    """The demo's recipe (``app.demo.prepare_files``), smaller: v1 masked-LM pre-trained on
    domain a, v2 continually pre-trained from it on domain b, a 3-topic task."""
    from recycling_core.tiny import make_corpus, make_synthetic_task, make_tiny_model
    from recycling_core.upgrade import UpgradeConfig, UpgradeRequest, simulate_upgrade

    files = root / "files"
    v0 = make_tiny_model(files / "v0", "encoder", seed=0)
    corpus_a = make_corpus(files / "corpus_a.txt", 1500, 0, "a")
    corpus_b = make_corpus(files / "corpus_b.txt", 1500, 1, "b")
    v1 = files / "v1"
    simulate_upgrade(
        UpgradeRequest(
            v0, corpus_a, v1, UpgradeConfig(steps=100, learning_rate=2e-3, max_length=64)
        )
    )
    v2 = files / "v2"
    simulate_upgrade(
        UpgradeRequest(
            v1,
            corpus_b,
            v2,
            UpgradeConfig(steps=40, learning_rate=5e-4, max_length=64, batch_size=16),
        )
    )
    task = make_synthetic_task(files / "task", n_train=400, n_dev=60, n_test=90, seed=0)
    wide = make_tiny_model(files / "wide", "encoder", seed=3, hidden_size=48)
    return StoryFiles(v1, v2, task, wide)


@dataclass
class DashboardData:
    campaign: dict[str, Any]
    source_adapter: dict[str, Any]
    best_adapter_id: str
    train_job: dict[str, Any]
    similarity_job: dict[str, Any]
    failed_job: dict[str, Any]
    metrics_before: str
    reports: dict[str, str] = field(default_factory=dict)
    """Report id per kind: train, compatibility, recycle, interpolation, similarity."""


def populate(client: RecycleClient, files: StoryFiles, timeout: float = 900.0) -> DashboardData:
    client.create_model(MODEL, "A tiny BERT and its continual pre-training upgrades")
    client.register_version(
        MODEL, files.v1, tags={"stage": "base"}, description="masked-LM pre-trained on domain a"
    )
    client.put_policy(MODEL, POLICY)
    client.create_task(TASK, files.task, description="synthetic topic classification")
    train = client.train_adapter(
        {
            "model": MODEL,
            "version": 1,
            "task": TASK,
            "adapter": {"peft": "lora", "lora_rank": 8, "lora_alpha": 16},
            "training": {**TRAINING, "steps": 120},
            "name": "topics-lora",
            "aliases": ["production"],
        }
    )
    train = client.wait_for_job(train["id"], timeout=timeout)
    assert train["status"] == "SUCCEEDED", train
    source = client.get_adapter(train["result_adapter_id"])
    metrics_before = client.metrics_text()

    client.register_version(
        MODEL,
        files.v2,
        parent_version=1,
        tags={"stage": "cpt-1"},
        aliases=["latest"],
        description="continual pre-training on domain b",
    )
    campaign = next(c for c in client.list_campaigns(model=MODEL)["items"] if c["to_version"] == 2)
    campaign = client.wait_for_campaign(campaign["id"], timeout=timeout)
    entry = campaign["summary"]["adapters"][source["id"]]
    best = entry["best"]["adapter_id"]

    similarity = client.submit_job(
        "similarity", {"old_adapter_id": source["id"], "new_adapter_id": best, "probes": 32}
    )
    similarity = client.wait_for_job(similarity["id"], timeout=timeout)

    # A version of another architecture (no parent: no campaign); the old adapter does not fit it.
    v3 = client.register_version(
        MODEL,
        files.wide,
        tags={"stage": "wider"},
        description="a wider encoder, trained separately",
    )
    failed = client.submit_job(
        "compatibility", {"adapter_id": source["id"], "to_version_id": v3["id"]}
    )
    failed = client.wait_for_job(failed["id"], timeout=timeout)

    jobs = {job["campaign_key"]: job for job in campaign["jobs"] if job.get("campaign_key")}
    reports = {
        "train": train["result_report_id"],
        "compatibility": jobs[f"compatibility:{source['id']}"]["result_report_id"],
        "recycle": jobs[f"recycle:{source['id']}:init"]["result_report_id"],
        "interpolation": jobs[f"interpolation:{source['id']}"]["result_report_id"],
        "similarity": similarity["result_report_id"],
    }
    return DashboardData(campaign, source, best, train, similarity, failed, metrics_before, reports)
