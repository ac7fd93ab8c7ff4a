"""Campaign rules on SQLite and PostgreSQL: policies, the per-adapter state machine, idempotency.

Job outcomes are written here directly (no ML): each test plays the worker's outcome
transaction with :func:`engine_helpers.finish_job` and checks what the campaign engine does.
"""

# ruff: noqa: F811  (the fixtures imported from engine_helpers are redefined as parameters)

from __future__ import annotations

import sqlalchemy as sa
from engine_helpers import (  # noqa: F401  (fixtures)
    compatibility_report,
    finish_job,
    interpolation_report,
    job_rows,
    recorder,
    recycle_report,
    register_v2,
    registry,
    settings_overrides,
    worker,
)
from svc_helpers import register_adapter

from app.campaigns import service as campaigns_service
from app.db import Adapter, AdapterAlias, Campaign, JobKind, JobStatus
from app.db.session import transaction
from app.events import record_event
from app.jobs.service import JobFinished


def _campaign(db) -> Campaign:  # type: ignore[no-untyped-def]
    with db.session() as session:
        rows = session.scalars(sa.select(Campaign)).all()
        assert len(rows) == 1
        return rows[0]


def _adapters_on(db, version_id: int) -> list[Adapter]:  # type: ignore[no-untyped-def]
    with db.session() as session:
        return list(
            session.scalars(
                sa.select(Adapter)
                .where(Adapter.model_version_id == version_id)
                .order_by(Adapter.created_at)
            ).all()
        )


def _production(db, version_id: int) -> str | None:  # type: ignore[no-untyped-def]
    with db.session() as session:
        return session.scalar(
            sa.select(AdapterAlias.adapter_id).where(
                AdapterAlias.model_version_id == version_id, AdapterAlias.alias == "production"
            )
        )


def _advance_again(db, campaign_id: str) -> None:  # type: ignore[no-untyped-def]
    with transaction(db.session_factory) as session:
        campaigns_service.advance_campaign(session, campaign_id)


# --------------------------------------------------------------------------- policy


def test_policy_defaults_and_replacement(client, recorder):  # noqa: F811
    client.post("/v1/models", json={"name": "tiny"})
    default = client.get("/v1/models/tiny/policy").json()
    assert default["is_default"] is True and default["auto_campaign"] is True
    assert default["methods"] == ["init"] and default["fresh_baseline"] is True
    assert default["gates"]["direct_min_retention"] == 0.98

    body = {
        "methods": ["init", "distill"],
        "step_budget": 20,
        "fresh_baseline": False,
        "gates": {
            "direct_min_retention": None,
            "recycled_min_metric": 0.5,
            "must_beat_fresh": False,
        },
        "training": {"learning_rate": 0.005},
        "auto_campaign": False,
    }
    saved = client.put("/v1/models/tiny/policy", json=body)
    assert saved.status_code == 200, saved.text
    read = client.get("/v1/models/tiny/policy").json()
    assert read["is_default"] is False and read["methods"] == ["init", "distill"]
    assert (
        read["training"] == {"learning_rate": 0.005} and read["gates"]["recycled_min_metric"] == 0.5
    )

    assert client.put("/v1/models/tiny/policy", json={"methods": ["magic"]}).status_code == 422
    assert (
        client.put("/v1/models/tiny/policy", json={"methods": ["init", "init"]}).status_code == 422
    )
    steps = client.put("/v1/models/tiny/policy", json={"training": {"steps": 5}})
    assert steps.status_code == 400 and steps.json()["error"] == "InvalidPolicy"
    assert client.get("/v1/models/nope/policy").status_code == 404


def test_no_campaign_when_auto_is_off(client, db, recorder, registry, tiny_model_v2_dir):  # noqa: F811
    client.put("/v1/models/tiny/policy", json={"auto_campaign": False})
    register_v2(client, tiny_model_v2_dir)
    with db.session() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(Campaign)) == 0
    assert recorder.jobs == []


# --------------------------------------------------------------------------- direct promotion


def test_upgrade_starts_campaign_and_promotes_direct(
    client, db, store, recorder, registry, tiny_model_v2_dir
):  # noqa: F811
    source = registry["adapter"]["id"]
    v2 = register_v2(client, tiny_model_v2_dir)
    campaign = _campaign(db)
    assert campaign.trigger == "auto" and campaign.status == "RUNNING"
    [compat] = job_rows(db, campaign_id=campaign.id)
    assert compat.kind == JobKind.COMPATIBILITY and compat.queue == "cpu"
    assert compat.params["adapter_id"] == source and compat.params["to_version_id"] == v2["id"]
    assert recorder.jobs == [(compat.id, "cpu", None)]  # sent once, after the commit

    finish_job(
        db,
        store,
        compat.id,
        JobStatus.SUCCEEDED,
        compatibility_report(compat.id, source=0.8, direct=0.79),
    )

    [direct] = _adapters_on(db, v2["id"])
    assert (
        direct.method == "direct" and direct.recycled_from_id == source and direct.status == "READY"
    )
    assert direct.job_id == compat.id
    assert _production(db, v2["id"]) == direct.id
    assert store.list_files(direct.artifact_uri) == sorted(direct.manifest)
    campaign = _campaign(db)
    assert campaign.status == "SUCCEEDED" and campaign.finished_at is not None
    entry = campaign.summary["adapters"][source]
    assert entry["outcome"] == "promoted_direct" and entry["promotion"]["adapter_id"] == direct.id
    assert abs(entry["compatibility"]["retention"] - 0.79 / 0.8) < 1e-9
    assert len(job_rows(db, campaign_id=campaign.id)) == 1  # no recycling needed

    _advance_again(db, campaign.id)  # a late or repeated step changes nothing
    assert len(_adapters_on(db, v2["id"])) == 1 and len(recorder.jobs) == 1


# --------------------------------------------------------------------------- recycling


def test_low_retention_recycles_then_promotes_best_and_interpolates(  # noqa: F811
    client, db, store, recorder, registry, tiny_model_v2_dir, lora_adapter_dir
):
    source = registry["adapter"]["id"]
    v2 = register_v2(client, tiny_model_v2_dir)
    campaign = _campaign(db)
    [compat] = job_rows(db, campaign_id=campaign.id)
    finish_job(
        db,
        store,
        compat.id,
        JobStatus.SUCCEEDED,
        compatibility_report(compat.id, source=0.8, direct=0.4),
    )

    recycle = {
        job.params["method"]: job
        for job in job_rows(db, campaign_id=campaign.id, kind=JobKind.RECYCLE)
    }
    assert set(recycle) == {"init", "fresh"}
    assert all(
        job.queue == "gpu" and job.params["training"]["steps"] == 200 for job in recycle.values()
    )
    sent = [job_id for job_id, _queue, _countdown in recorder.jobs]
    assert sorted(sent[1:]) == sorted(job.id for job in recycle.values())

    # The compatibility job "finishing" again (a duplicate event) must not enqueue anything twice.
    with transaction(db.session_factory) as session:
        record_event(session, JobFinished.of(session.get(type(compat), compat.id)))
    _advance_again(db, campaign.id)
    assert len(job_rows(db, campaign_id=campaign.id)) == 3 and len(recorder.jobs) == 3

    finish_job(
        db,
        store,
        recycle["init"].id,
        JobStatus.SUCCEEDED,
        recycle_report(
            recycle["init"].id, "init", test=0.9, curve=[(0, 0.5), (5, 0.85), (10, 0.9)]
        ),
        adapter_dir=lora_adapter_dir,
    )
    assert _campaign(db).status == "RUNNING"  # fresh still running
    assert len(job_rows(db, campaign_id=campaign.id)) == 3
    finish_job(
        db,
        store,
        recycle["fresh"].id,
        JobStatus.SUCCEEDED,
        recycle_report(
            recycle["fresh"].id, "fresh", test=0.8, curve=[(0, 0.3), (5, 0.6), (10, 0.85)]
        ),
        adapter_dir=lora_adapter_dir,
    )

    campaign = _campaign(db)
    entry = campaign.summary["adapters"][source]
    init_adapter = get_job_adapter(db, recycle["init"].id)
    assert entry["best"]["method"] == "init" and entry["best"]["adapter_id"] == init_adapter
    assert entry["gates"]["passed"] is True and entry["promotion"]["adapter_id"] == init_adapter
    assert _production(db, v2["id"]) == init_adapter
    # target = 0.99 × fresh best (0.85); fresh reaches it at step 10, init at step 5: speedup 2.
    assert entry["methods"]["fresh"]["steps_to_target"] == 10
    assert (
        entry["methods"]["init"]["steps_to_target"] == 5
        and entry["methods"]["init"]["speedup"] == 2.0
    )
    assert entry["methods"]["init"]["test"] == 0.9

    [interpolation] = job_rows(db, campaign_id=campaign.id, kind=JobKind.INTERPOLATION)
    assert interpolation.params["old_adapter_id"] == source
    assert (
        interpolation.params["new_adapter_id"] == init_adapter
        and interpolation.params["mode"] == "model"
    )
    assert recorder.job_ids.count(interpolation.id) == 1
    _advance_again(db, campaign.id)
    assert len(job_rows(db, campaign_id=campaign.id, kind=JobKind.INTERPOLATION)) == 1
    assert campaign.status == "RUNNING"

    finish_job(
        db, store, interpolation.id, JobStatus.SUCCEEDED, interpolation_report(interpolation.id)
    )
    campaign = _campaign(db)
    assert campaign.status == "SUCCEEDED"
    entry = campaign.summary["adapters"][source]
    assert entry["outcome"] == "recycled" and entry["interpolation"]["accuracy_barrier"] == 0.15
    assert campaign.summary["totals"] == {"adapters": 1, "done": 1, "promoted": 1, "failed": 0}


def get_job_adapter(db, job_id: str) -> str:  # type: ignore[no-untyped-def]
    [job] = job_rows(db, id=job_id)
    assert job.result_adapter_id is not None
    return job.result_adapter_id


def test_gates_can_refuse_promotion(
    client, db, store, recorder, registry, tiny_model_v2_dir, lora_adapter_dir
):  # noqa: F811
    client.put(
        "/v1/models/tiny/policy",
        json={
            "methods": ["init"],
            "step_budget": 20,
            "gates": {"direct_min_retention": None, "must_beat_fresh": True},
        },
    )
    source = registry["adapter"]["id"]
    v2 = register_v2(client, tiny_model_v2_dir)
    campaign = _campaign(db)
    [compat] = job_rows(db, campaign_id=campaign.id)
    # Retention 1.0 would pass the default direct gate; this policy turned it off.
    finish_job(
        db,
        store,
        compat.id,
        JobStatus.SUCCEEDED,
        compatibility_report(compat.id, source=0.8, direct=0.8),
    )
    recycle = {
        job.params["method"]: job
        for job in job_rows(db, campaign_id=campaign.id, kind=JobKind.RECYCLE)
    }
    assert recycle["init"].params["training"]["steps"] == 20
    for method, test in (("init", 0.7), ("fresh", 0.8)):
        finish_job(
            db,
            store,
            recycle[method].id,
            JobStatus.SUCCEEDED,
            recycle_report(recycle[method].id, method, test=test, curve=[(0, 0.3), (20, test)]),
            adapter_dir=lora_adapter_dir,
        )
    entry = _campaign(db).summary["adapters"][source]
    assert entry["gates"]["passed"] is False and "fresh baseline" in entry["gates"]["reasons"][0]
    assert entry["outcome"] == "not_promoted" and entry["promotion"] is None
    assert _production(db, v2["id"]) is None
    [interpolation] = job_rows(db, campaign_id=campaign.id, kind=JobKind.INTERPOLATION)
    finish_job(db, store, interpolation.id, JobStatus.FAILED, error="no memory")
    assert _campaign(db).status == "SUCCEEDED"  # not promoting is a result, not a failure


def test_incompatible_adapter_fails_alone(  # noqa: F811
    client, db, store, recorder, registry, tiny_model_v2_dir, lora_adapter_dir
):
    first = registry["adapter"]["id"]
    second = register_adapter(client, lora_adapter_dir)["id"]
    v2 = register_v2(client, tiny_model_v2_dir)
    campaign = _campaign(db)
    compat = {job.params["adapter_id"]: job for job in job_rows(db, campaign_id=campaign.id)}
    assert set(compat) == {first, second}
    finish_job(
        db, store, compat[first].id, JobStatus.FAILED, error="module query: shape (4, 32) ≠ (4, 48)"
    )
    assert _campaign(db).status == "RUNNING"
    finish_job(
        db,
        store,
        compat[second].id,
        JobStatus.SUCCEEDED,
        compatibility_report(compat[second].id, source=0.8, direct=0.8),
    )
    campaign = _campaign(db)
    assert campaign.status == "PARTIAL"
    failed = campaign.summary["adapters"][first]
    assert failed["outcome"] == "failed" and "shape (4, 32)" in failed["error"]
    assert campaign.summary["adapters"][second]["outcome"] == "promoted_direct"
    assert [a.recycled_from_id for a in _adapters_on(db, v2["id"])] == [second]


def test_all_adapters_failing_fails_the_campaign(
    client, db, store, recorder, registry, tiny_model_v2_dir
):  # noqa: F811
    register_v2(client, tiny_model_v2_dir)
    [compat] = job_rows(db)
    finish_job(db, store, compat.id, JobStatus.FAILED)
    assert _campaign(db).status == "FAILED"


# --------------------------------------------------------------------------- manual campaigns


def test_manual_campaign(client, db, recorder, registry, tiny_model_v2_dir):  # noqa: F811
    client.put("/v1/models/tiny/policy", json={"auto_campaign": False})
    register_v2(client, tiny_model_v2_dir)
    body = {
        "model": "tiny",
        "from_version": 1,
        "to_version": 2,
        "methods": ["distill"],
        "step_budget": 7,
        "fresh_baseline": False,
    }
    assert client.post("/v1/campaigns", json={**body, "model": "nope"}).status_code == 404
    assert client.post("/v1/campaigns", json={**body, "to_version": 1}).status_code == 400
    assert client.post("/v1/campaigns", json={**body, "to_version": 9}).status_code == 404
    assert client.post("/v1/campaigns", json={**body, "methods": ["bogus"]}).status_code == 422
    unknown = client.post("/v1/campaigns", json={**body, "adapter_ids": ["no-such-adapter"]})
    assert unknown.status_code == 404
    reverse = client.post("/v1/campaigns", json={**body, "from_version": 2, "to_version": 1})
    assert reverse.status_code == 400 and reverse.json()["error"] == "NoAdapters"
    assert recorder.jobs == []

    response = client.post(
        "/v1/campaigns", json={**body, "adapter_ids": [registry["adapter"]["id"]]}
    )
    assert response.status_code == 202, response.text
    created = response.json()
    assert created["trigger"] == "manual" and created["status"] == "RUNNING"
    assert created["policy"]["methods"] == ["distill"] and created["policy"]["step_budget"] == 7
    assert [job["kind"] for job in created["jobs"]] == ["compatibility"]
    assert recorder.job_ids == [created["jobs"][0]["id"]]

    listed = client.get("/v1/campaigns", params={"model": "tiny"}).json()
    assert listed["total"] == 1 and listed["items"][0]["from_version"] == 1
    assert client.get("/v1/campaigns", params={"status": "SUCCEEDED"}).json()["total"] == 0
    detail = client.get(f"/v1/campaigns/{created['id']}").json()
    assert detail["jobs"][0]["status"] == "QUEUED"
    assert client.get("/v1/campaigns/nope").status_code == 404
