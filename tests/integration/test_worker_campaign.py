"""A whole automatic campaign through a real Celery worker process, on both stacks.

Registers tiny v1, a task and a plain-PEFT adapter, registers v2 with parent v1, and follows
the campaign that starts by itself to its end; then checks the rows (jobs, adapters with
lineage, reports) and the stored artifacts (every file present, every sha256 matching).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from worker_helpers import Stack, register_basics, register_v2, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

POLICY = {
    "methods": ["init"],
    "step_budget": 20,
    "fresh_baseline": True,
    # Retention of an untrained adapter says little; recycle it whatever it is.
    "gates": {"direct_min_retention": None},
    "training": {"learning_rate": 0.005, "batch_size": 16, "eval_every": 5},
}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_auto_campaign_runs_on_a_real_worker(stack: Stack, api, tiny) -> None:  # type: ignore[no-untyped-def]
    basics = register_basics(api, tiny)
    assert api.put("/v1/models/tiny/policy", json=POLICY).status_code == 200
    stack.start_worker()
    v2 = register_v2(api, tiny)

    campaigns = api.get("/v1/campaigns", params={"model": "tiny"}).json()
    assert campaigns["total"] == 1, "registering v2 with parent v1 must start a campaign"
    campaign_id = campaigns["items"][0]["id"]

    def finished():  # type: ignore[no-untyped-def]
        body = api.get(f"/v1/campaigns/{campaign_id}").json()
        return body if body["status"] not in ("PENDING", "RUNNING") else None

    campaign = wait_for(finished, 180, "the campaign to finish", stack)
    assert campaign["status"] == "SUCCEEDED", (campaign, stack.worker_logs())
    assert campaign["trigger"] == "auto"

    jobs = {(job["kind"], job["params"].get("method")): job for job in campaign["jobs"]}
    assert set(jobs) == {
        ("compatibility", None),
        ("recycle", "init"),
        ("recycle", "fresh"),
        ("interpolation", None),
    }
    for job in jobs.values():
        assert job["status"] == "SUCCEEDED", job
        assert job["attempts"] == 1 and job["worker"] and job["result_report_id"]
        report = api.get(f"/v1/reports/{job['result_report_id']}").json()
        assert report["job_id"] == job["id"] and report["document"]["kind"] == job["kind"]
        if job["kind"] == "recycle":
            # the campaign's two training jobs on v2 shared one batched pass on the worker
            assert report["document"]["output"]["batched_with"] == 2, report["document"]["output"]
    assert (
        jobs[("compatibility", None)]["queue"] == "cpu"
        and jobs[("recycle", "init")]["queue"] == "gpu"
    )

    source = basics["adapter"]["id"]
    entry = campaign["summary"]["adapters"][source]
    assert entry["stage"] == "done" and entry["outcome"] == "recycled"
    assert 0 <= entry["compatibility"]["source"] <= 1 and entry["compatibility"]["retention"] >= 0
    assert set(entry["methods"]) == {"init", "fresh"}
    assert all(isinstance(entry["methods"][m]["test"], float) for m in ("init", "fresh"))
    assert "steps_to_target" in entry["methods"]["init"]
    assert (
        entry["interpolation"]["status"] == "SUCCEEDED"
        and "accuracy_barrier" in entry["interpolation"]
    )
    promoted = entry["promotion"]["adapter_id"]

    recycled = api.get("/v1/adapters", params={"model": "tiny", "version": 2}).json()["items"]
    assert {adapter["method"] for adapter in recycled} == {"init", "fresh"}
    artifact_root = stack.data_dir / "artifacts"
    for adapter in recycled:
        assert adapter["status"] == "READY" and adapter["recycled_from"] == source
        assert adapter["model_version_id"] == v2["id"]
        assert adapter["job_id"] == jobs[("recycle", adapter["method"])]["id"]
        assert adapter["job_id"] and adapter["fingerprint"]
        directory = artifact_root / "adapters" / adapter["id"]
        assert sorted(
            p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()
        ) == sorted(adapter["manifest"])
        for relative, digest in adapter["manifest"].items():
            assert _sha256(directory / relative) == digest
        assert "adapter_config.json" in adapter["manifest"]
    assert next(a for a in recycled if a["id"] == promoted)["aliases"] == ["production"]
    # Nothing half-written anywhere in the store.
    assert not [p for p in artifact_root.rglob("*") if ".tmp-" in p.name]
