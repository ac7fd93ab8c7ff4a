"""The benchmark's collection, aggregation, tables, claims and plots on REAL report documents.

A tiny lineage is made with the library (tiny BERT v0, a short masked-LM upgrade to v1), a LoRA
adapter is trained on v0, and every kind of report the benchmark reads is produced by
recycling_core itself (train, compatibility, recycle with fresh/init/distill/init_distill in both
regimes, interpolation in both modes, attention similarity). Those documents go through the same
code the runner uses on the service's ``GET /v1/reports/{id}`` documents.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench import collect, plots
from bench.data import PreparedData, derive_task, stratified_subset
from bench.lineage import hop_summary
from bench.paper_findings import build_records, check_campaign_agreement, claims_markdown
from bench.profiles import DataSettings
from recycling_core.adaptation import AdapterOptions
from recycling_core.data import load_task
from recycling_core.pipeline import (
    CompatibilityRequest,
    InterpolationRequest,
    RecycleRequest,
    SimilarityRequest,
    TrainRequest,
    attention_similarity,
    compatibility_report,
    interpolate,
    recycle_adapter,
    train_adapter,
)
from recycling_core.tiny import make_corpus, make_synthetic_task, make_tiny_model
from recycling_core.training import TrainingConfig
from recycling_core.upgrade import UpgradeConfig, UpgradeRequest, simulate_upgrade

torch.set_num_threads(1)

HOP = "M0→M1"


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Real reports of every kind, from a tiny model; returned as JSON documents with contexts."""
    root = tmp_path_factory.mktemp("bench")
    v0 = make_tiny_model(root / "v0", kind="encoder", seed=0)
    corpus = make_corpus(root / "corpus.txt", 300, seed=1, domain="b")
    heldout = make_corpus(root / "heldout.txt", 60, seed=2, domain="b")
    upgrade = simulate_upgrade(
        UpgradeRequest(v0, corpus, root / "v1", UpgradeConfig(steps=6, batch_size=8, learning_rate=3e-3, max_length=32, head_warmup_steps=2), eval_corpora=(heldout,))
    )
    v1 = root / "v1"
    task = make_synthetic_task(root / "task", n_train=96, n_dev=24, n_test=24, seed=0)
    config = TrainingConfig(steps=12, batch_size=8, learning_rate=5e-3, eval_every=4, max_length=32, device="cpu")
    a0 = root / "a0"
    entries = [({"task": "synthetic", "regime": "source", "role": "train_v1"}, train_adapter(TrainRequest(v0, task, a0, adapter=AdapterOptions(peft="lora", lora_rank=4, lora_alpha=8), training=config)))]
    context = {"task": "synthetic", "hop": HOP, "seed": 0}
    entries.append(({**context, "regime": "full", "role": "direct"}, compatibility_report(CompatibilityRequest(a0, v0, v1, task, device="cpu"))))
    for regime, few, methods in (("full", None, ("fresh", "init")), ("few", 4, ("fresh", "distill", "init", "init_distill"))):
        for method in methods:
            report = recycle_adapter(RecycleRequest(method, a0, v0, v1, task, root / f"{regime}-{method}", training=config, few_shot=few))
            entries.append(({**context, "regime": regime, "role": method}, report))
    for mode in ("model", "adapter"):
        report = interpolate(InterpolationRequest(mode, v0, a0, v1, root / "full-fresh", task, points=3, device="cpu"))
        entries.append(({**context, "regime": "analysis", "role": f"interp_{mode}_fresh"}, report))
    for name in ("fresh", "init"):
        report = attention_similarity(SimilarityRequest(v0, a0, v1, root / f"full-{name}", task, probes=8, device="cpu"))
        entries.append(({**context, "regime": "analysis", "role": f"similarity_{name}"}, report))
    raw = []
    for index, (ctx, report) in enumerate(entries):
        document = json.loads(report.model_dump_json())  # what GET /v1/reports/{id} returns as "document"
        raw.append({"context": ctx, "document": document, "job_id": f"job-{index}", "report_id": document["report_id"], "campaign_id": None})
    return {"raw": raw, "upgrade": upgrade, "heldout": heldout, "corpus": corpus, "root": root, "task": task}


def test_records_keep_ids_fingerprints_and_metrics(produced: dict) -> None:
    records = build_records(produced["raw"])
    assert len(records) == len(produced["raw"])
    for record, entry in zip(records, produced["raw"]):
        assert record["report_id"] == entry["document"]["report_id"] and record["job_id"] == entry["job_id"]
        assert record["fingerprints"], record["role"]
        assert all(len(sha) == 64 for sha in record["fingerprints"].values())
    by_role = {(r["regime"], r["role"]): r for r in records}
    direct = by_role[("full", "direct")]["metrics"]["compatibility"]
    assert 0.0 <= direct["direct"] <= 1.0 and direct["retention"] == pytest.approx(direct["direct"] / direct["source"])
    assert {"task:train", "task:dev", "task:test", "old_base", "new_base", "adapter"} <= set(by_role[("full", "init")]["fingerprints"])
    interp = by_role[("analysis", "interp_model_fresh")]["metrics"]["interpolation"]
    assert interp["alphas"] == [0.0, 0.5, 1.0] and len(interp["losses"]) == 3
    similarity = by_role[("analysis", "similarity_fresh")]["metrics"]["similarity"]
    assert len(similarity["matrix"]) == 2 and len(similarity["matrix"][0]) == 4  # tiny BERT: 2 layers × 4 heads


def test_convergence_against_fresh_matches_the_library(produced: dict) -> None:
    from recycling_core.metrics.convergence import steps_to_target

    records = build_records(produced["raw"])
    fresh = next(r for r in records if r["regime"] == "full" and r["role"] == "fresh")
    init = next(r for r in records if r["regime"] == "full" and r["role"] == "init")
    target = 0.99 * fresh["metrics"]["curve"]["best_metric"]
    ours = init["metrics"]["vs_fresh"]["target99"]
    assert ours["target"] == pytest.approx(target)
    assert ours["steps_to_target"] == steps_to_target(list(zip(init["metrics"]["curve"]["steps"], init["metrics"]["curve"]["dev"])), target)
    assert fresh["metrics"]["vs_fresh"]["target100"]["steps_to_target"] == fresh["metrics"]["curve"]["best_step"] or fresh["metrics"]["curve"]["best_step"] is not None
    # the campaign summary's numbers are compared with ours; a mismatch is reported
    init["campaign_summary"] = {"steps_to_target": ours["steps_to_target"]}
    assert check_campaign_agreement(records) == []
    init["campaign_summary"] = {"steps_to_target": -1}
    assert len(check_campaign_agreement(records)) == 1


def test_aggregate_tables_claims_over_seeds(produced: dict) -> None:
    raw_two_seeds = produced["raw"] + [
        {**e, "context": {**e["context"], "seed": 1}, "job_id": e["job_id"] + "-s1"} for e in produced["raw"] if e["context"].get("hop")
    ]
    records = build_records(raw_two_seeds)
    agg = collect.aggregate(records)
    key = f"lora/synthetic/{HOP}/full/init"
    stat = agg[key]["test"]
    assert stat["n"] == 2 and stat["std"] == pytest.approx(0.0)
    assert agg[key]["job_ids"][1].endswith("-s1")
    tables = collect.markdown_tables(records, {"hops": {HOP: hop_summary(produced["upgrade"], "b", _prepared(produced))}})
    assert "### Compatibility, LoRA" in tables and "| synthetic | M0→M1 |" in tables
    assert f"{stat['mean']:.3f} ± 0.000" in tables
    assert "### Model lineage" in tables and "→" in tables
    claims = collect.evaluate_claims(records)
    assert set(claims) == {"compatibility", "interpolation_low_loss", "attention_similarity", "init_faster_no_worse", "distill_helps_few_shot", "combining_best"}
    for name, claim in claims.items():
        assert claim["of"] == 1, name
        cell = claim["cells"][0]
        assert cell["held"] in (True, False)
    few = agg[f"lora/synthetic/{HOP}/few/distill"]["test"]["mean"], agg[f"lora/synthetic/{HOP}/few/fresh"]["test"]["mean"]
    assert claims["distill_helps_few_shot"]["cells"][0]["held"] == (few[0] > few[1])
    assert "held in" in claims_markdown(claims)


def _prepared(produced: dict) -> PreparedData:
    return PreparedData(root=produced["root"], tasks={}, corpora={"b": {"heldout": produced["heldout"], "train": produced["corpus"]}}, manifest={"files": {}})


def test_lineage_summary_reads_both_held_out_losses(produced: dict) -> None:
    summary = hop_summary(produced["upgrade"], "b", _prepared(produced))
    assert summary["relative_l2"] > 0 and summary["mlm_loss"]["b"]["before"] > 0 and summary["mlm_loss"]["b"]["after"] > 0
    assert summary["report_id"] == produced["upgrade"].report_id


def test_plots_are_pngs(produced: dict, tmp_path: Path) -> None:
    records = build_records(produced["raw"])
    made = plots.plot_all(records, tmp_path)
    assert {"convergence_full_lora", "convergence_few_lora", "interpolation_lora", "similarity_lora"} <= set(made)
    for path in made.values():
        content = Path(path).read_bytes()
        assert content[:8] == b"\x89PNG\r\n\x1a\n" and len(content) > 5000


def test_derived_splits_are_seeded_and_stratified(produced: dict, tmp_path: Path) -> None:
    settings = DataSettings(dev_size=12, test_size=12, max_words=5, corpus_train_lines=None)
    first = load_task(derive_task(produced["task"], tmp_path / "a", settings))
    second = load_task(derive_task(produced["task"], tmp_path / "b", settings))
    assert first.split_sha256 == second.split_sha256
    assert len(first.dev) == 12 and len(first.test) == 12 and all(len(e.text.split()) <= 5 for e in first.train)
    full = load_task(produced["task"])
    subset = stratified_subset(full.test, 12, seed=0)
    labels = {e.label for e in full.test}
    assert {e.label for e in subset} == labels
