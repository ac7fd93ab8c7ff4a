"""Jobs: the API (validation, 202, after-commit enqueue, list, cancel, events) and the worker's
run of a job in this process (claim, outcome rows and artifacts, retries, cancel, idempotency).
"""

# ruff: noqa: F811  (the fixtures imported from engine_helpers are redefined as parameters)

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from engine_helpers import (  # noqa: F401  (fixtures)
    get_job,
    job_rows,
    recorder,
    register_v2,
    registry,
    run_sent_jobs,
    settings_overrides,
    worker,
)
from svc_helpers import register_version

from app.db import Adapter, Job, JobStatus, Report, utcnow
from app.db.session import transaction
from app.jobs import execution
from app.jobs import service as jobs_service
from app.queue import enqueue_job
from recycling_core.files import sha256_file

TINY_TRAINING = {"steps": 4, "batch_size": 8, "learning_rate": 0.005, "eval_every": 2}


def _recycle_body(registry, to_version_id: int, **params) -> dict:  # type: ignore[no-untyped-def]
    return {
        "kind": "recycle",
        "params": {
            "adapter_id": registry["adapter"]["id"],
            "to_version_id": to_version_id,
            "method": "init",
            "training": TINY_TRAINING,
            **params,
        },
    }


# --------------------------------------------------------------------------- API


def test_create_job_validates_against_the_registry(client, recorder, registry, tiny_model_v2_dir):  # noqa: F811
    client.put("/v1/models/tiny/policy", json={"auto_campaign": False})
    v2 = register_v2(client, tiny_model_v2_dir)

    def post(body):  # type: ignore[no-untyped-def]
        return client.post("/v1/jobs", json=body)

    missing = post(_recycle_body(registry, v2["id"], adapter_id="nope"))
    assert missing.status_code == 404 and missing.json()["error"] == "AdapterNotFound"
    assert post(_recycle_body(registry, 999)).status_code == 404
    same = post(_recycle_body(registry, registry["v1"]["id"]))
    assert same.status_code == 400 and same.json()["error"] == "SameVersion"
    assert post(_recycle_body(registry, v2["id"], method="magic")).status_code == 422
    assert (
        post(_recycle_body(registry, v2["id"], training={"learning_rate": -1})).status_code == 422
    )
    assert post(_recycle_body(registry, v2["id"], unknown=1)).status_code == 422
    assert post({"kind": "teleport", "params": {}}).status_code == 422
    train = post({"kind": "train", "params": {"model_version_id": registry["v1"]["id"]}})
    assert train.status_code == 400  # no task named
    assert (
        post(
            {"kind": "train", "params": {"model_version_id": registry["v1"]["id"], "task": "x"}}
        ).status_code
        == 404
    )
    assert recorder.jobs == []  # nothing was queued by refused requests

    created = post(_recycle_body(registry, v2["id"]))
    assert created.status_code == 202, created.text
    job = created.json()
    assert job["status"] == "QUEUED" and job["queue"] == "gpu" and job["attempts"] == 0
    assert job["params"]["from_version_id"] == registry["v1"]["id"]
    assert (
        job["params"]["training"]["steps"] == 4
        and job["params"]["training"]["learning_rate"] == 0.005
    )
    assert recorder.jobs == [(job["id"], "gpu", None)]

    compat = post(
        {
            "kind": "compatibility",
            "params": {"adapter_id": registry["adapter"]["id"], "to_version_id": v2["id"]},
        }
    )
    assert compat.status_code == 202 and compat.json()["queue"] == "cpu"

    assert client.get(f"/v1/jobs/{job['id']}").json()["id"] == job["id"]
    assert client.get("/v1/jobs/nope").status_code == 404
    assert client.get("/v1/jobs", params={"kind": "recycle"}).json()["total"] == 1
    assert client.get("/v1/jobs", params={"status": "QUEUED"}).json()["total"] == 2
    page = client.get("/v1/jobs", params={"limit": 1, "offset": 1}).json()
    assert page["total"] == 2 and len(page["items"]) == 1 and page["items"][0]["id"] == job["id"]


def test_enqueue_happens_after_commit_and_not_on_rollback(db, recorder, registry, settings):  # noqa: F811
    params = {"model_version_id": registry["v1"]["id"], "task_id": registry["task"]["id"]}
    with pytest.raises(RuntimeError), transaction(db.session_factory) as session:
        job = jobs_service.add_job(session, settings, "train", params)  # type: ignore[arg-type]
        assert recorder.jobs == []  # not before the commit
        raise RuntimeError("the request failed after creating the job")
    assert recorder.jobs == [] and job_rows(db) == []

    with transaction(db.session_factory) as session:
        job = jobs_service.add_job(session, settings, "train", params)  # type: ignore[arg-type]
        enqueue_job(session, job)  # twice in one transaction: one message
        assert recorder.jobs == []
    assert recorder.jobs == [(job.id, "gpu", None)]


def test_cancel(client, db, recorder, worker, registry, tiny_model_v2_dir):  # noqa: F811
    client.put("/v1/models/tiny/policy", json={"auto_campaign": False})
    v2 = register_v2(client, tiny_model_v2_dir)
    queued = client.post("/v1/jobs", json=_recycle_body(registry, v2["id"])).json()
    cancelled = client.post(f"/v1/jobs/{queued['id']}/cancel")
    assert cancelled.status_code == 202 and cancelled.json()["status"] == "CANCELLED"
    assert execution.execute_job(worker, queued["id"]).startswith(
        "skipped"
    )  # its message is a no-op
    again = client.post(f"/v1/jobs/{queued['id']}/cancel")
    assert again.status_code == 409 and again.json()["error"] == "JobFinished"

    running = client.post("/v1/jobs", json=_recycle_body(registry, v2["id"])).json()
    assert execution.claim_job(worker, running["id"]).claimed
    requested = client.post(f"/v1/jobs/{running['id']}/cancel").json()
    assert requested["status"] == "RUNNING" and requested["cancel_requested"] is True
    monitor = execution.JobMonitor(worker, running["id"])
    assert monitor.should_cancel() is True and monitor.claim_lost is False
    assert client.post("/v1/jobs/nope/cancel").status_code == 404


# --------------------------------------------------------------------------- worker runs


def test_train_job_end_to_end(client, db, store, recorder, worker, registry):  # noqa: F811
    response = client.post(
        "/v1/adapters/train",
        json={
            "model": "tiny",
            "version": 1,
            "task": "topics",
            "training": TINY_TRAINING,
            "adapter": {"peft": "lora", "lora_rank": 4},
            "name": "trained",
            "aliases": ["candidate"],
        },
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    assert run_sent_jobs(worker, recorder) == {job_id: "succeeded"}

    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "SUCCEEDED" and job["attempts"] == 1 and job["worker"] == worker.worker
    assert job["progress"]["step"] == 4 and job["progress"]["total"] == 4
    assert [point["step"] for point in job["progress"]["eval_points"]] == [0, 2, 4]
    assert job["cost"]["wall_seconds"] > 0 and job["finished_at"] is not None
    adapter = client.get(f"/v1/adapters/{job['result_adapter_id']}").json()
    assert (
        adapter["status"] == "READY"
        and adapter["method"] == "train"
        and adapter["job_id"] == job_id
    )
    assert adapter["name"] == "trained" and adapter["aliases"] == ["candidate"]
    assert adapter["metrics"]["report_id"] == job["result_report_id"]
    report = client.get(f"/v1/reports/{job['result_report_id']}").json()
    assert report["job_id"] == job_id and report["document"]["kind"] == "train"
    local = store.local_directory(adapter["artifact_uri"])
    assert local is not None
    for relative, digest in adapter["manifest"].items():
        assert sha256_file(local / relative) == digest
    assert not worker.checkpoint_dir(job_id).exists() and not worker.work_dir(job_id).exists()

    # The message delivered again (a redelivery, a duplicate) changes nothing.
    assert execution.execute_job(worker, job_id) == "skipped: already SUCCEEDED"
    with db.session() as session:
        assert (
            session.scalar(
                sa.select(sa.func.count()).select_from(Adapter).where(Adapter.job_id == job_id)
            )
            == 1
        )
        assert (
            session.scalar(
                sa.select(sa.func.count()).select_from(Report).where(Report.job_id == job_id)
            )
            == 1
        )

    with client.stream("GET", f"/v1/jobs/{job_id}/events") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        text = "".join(stream.iter_text())
    assert "event: status" in text
    final = json.loads(text.strip().splitlines()[-1].removeprefix("data: "))
    assert final["status"] == "SUCCEEDED" and final["result_adapter_id"] == adapter["id"]
    assert client.get("/v1/jobs/nope/events").status_code == 404


def test_recycle_job_records_lineage(
    client, db, store, recorder, worker, registry, tiny_model_v2_dir
):  # noqa: F811
    client.put("/v1/models/tiny/policy", json={"auto_campaign": False})
    v2 = register_v2(client, tiny_model_v2_dir)
    job_id = client.post("/v1/jobs", json=_recycle_body(registry, v2["id"])).json()["id"]
    assert run_sent_jobs(worker, recorder)[job_id] == "succeeded"
    job = get_job(db, job_id)
    adapter = client.get(f"/v1/adapters/{job.result_adapter_id}").json()
    assert adapter["recycled_from"] == registry["adapter"]["id"] and adapter["method"] == "init"
    assert adapter["model_version_id"] == v2["id"] and adapter["lineage_version"] == 2
    document = client.get(f"/v1/reports/{job.result_report_id}").json()["document"]
    assert document["method"] == "init" and document["metrics"]["compatibility"]["retention"] >= 0
    assert document["inputs"]["adapter_id"] == registry["adapter"]["id"]


def test_recycle_jobs_of_one_base_train_in_one_batched_pass(
    client, db, store, recorder, worker, registry, tiny_model_v2_dir
):  # noqa: F811
    client.put("/v1/models/tiny/policy", json={"auto_campaign": False})
    v2 = register_v2(client, tiny_model_v2_dir)
    together = [
        client.post("/v1/jobs", json=_recycle_body(registry, v2["id"], method=method)).json()["id"]
        for method in ("init", "fresh", "init")
    ]
    other_settings = {**TINY_TRAINING, "learning_rate": 0.05}
    alone = client.post("/v1/jobs", json=_recycle_body(registry, v2["id"], training=other_settings)).json()["id"]
    outcomes = run_sent_jobs(worker, recorder)
    assert outcomes[together[0]] == "succeeded" and outcomes[alone] == "succeeded"
    assert all(outcomes[job_id].startswith("skipped") for job_id in together[1:])
    for job_id in together:
        job = get_job(db, job_id)
        assert job.status == JobStatus.SUCCEEDED and job.attempts == 1
        document = client.get(f"/v1/reports/{job.result_report_id}").json()["document"]
        assert document["output"]["batched_with"] == 3
        assert document["curve"]["train_loss"], document["curve"]
    solo = client.get(f"/v1/reports/{get_job(db, alone).result_report_id}").json()["document"]
    assert solo["output"].get("batched_with", 1) == 1


def test_library_error_fails_without_retry(client, db, recorder, worker, registry, wide_model_dir):  # noqa: F811
    client.put("/v1/models/tiny/policy", json={"auto_campaign": False})
    wide = register_version(client, wide_model_dir, parent=1)
    body = {
        "kind": "compatibility",
        "params": {"adapter_id": registry["adapter"]["id"], "to_version_id": wide["id"]},
    }
    job_id = client.post("/v1/jobs", json=body).json()["id"]
    assert run_sent_jobs(worker, recorder) == {job_id: "failed"}
    job = get_job(db, job_id)
    assert job.status == JobStatus.FAILED and job.error_code == "IncompatibleAdapter"
    assert job.attempts == 1 and job.error_message and recorder.job_ids == [job_id]


def test_transient_errors_retry_with_backoff_then_fail(
    client, db, recorder, worker, registry, monkeypatch
):  # noqa: F811
    calls: list[str] = []

    def flaky(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        calls.append("run")
        raise sa.exc.OperationalError("SELECT 1", {}, Exception("server closed the connection"))

    monkeypatch.setattr(execution, "run_core", flaky)
    worker.settings.job_retry_backoff_seconds = 2.0
    job_id = client.post(
        "/v1/adapters/train",
        json={"model": "tiny", "version": 1, "task": "topics", "max_attempts": 2},
    ).json()["id"]
    assert execution.execute_job(worker, job_id) == "retry"
    job = get_job(db, job_id)
    assert (
        job.status == JobStatus.QUEUED and job.attempts == 1 and job.error_code == "TransientError"
    )
    assert (
        recorder.jobs[-1][0] == job_id and 1.5 <= recorder.jobs[-1][2] <= 2.5
    )  # backoff 2 s ± 20 %
    assert execution.execute_job(worker, job_id) == "failed"
    job = get_job(db, job_id)
    assert (
        job.status == JobStatus.FAILED
        and job.attempts == 2
        and job.error_code == "RetriesExhausted"
    )
    assert "server closed the connection" in (job.error_message or "")
    assert calls == ["run", "run"] and len(recorder.jobs) == 2


def test_failed_outcome_transaction_leaves_no_adapter(
    client, db, store, recorder, worker, registry, monkeypatch
):  # noqa: F811
    def broken_report(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("disk full while writing the report row")

    monkeypatch.setattr(execution.reports_service, "store_report", broken_report)
    job_id = client.post(
        "/v1/adapters/train",
        json={"model": "tiny", "version": 1, "task": "topics", "training": TINY_TRAINING},
    ).json()["id"]
    assert execution.execute_job(worker, job_id) == "failed"
    job = get_job(db, job_id)
    assert (
        job.status == JobStatus.FAILED
        and job.error_code == "InternalError"
        and job.result_adapter_id is None
    )
    with db.session() as session:
        assert (
            session.scalar(
                sa.select(sa.func.count()).select_from(Adapter).where(Adapter.job_id == job_id)
            )
            == 0
        )
    produced = store.uri_for(f"adapters/{execution._produced_adapter_id(job_id)}")
    assert not store.exists(produced)
    # Only the uploaded adapter's files are stored: nothing half-written, no staging leftovers.
    assert sorted(path.name for path in (Path(store.root_path) / "adapters").iterdir()) == [
        registry["adapter"]["id"]
    ]


def test_cancel_while_running(client, db, recorder, worker, registry, monkeypatch):  # noqa: F811
    real_run = execution.run_core

    def cancel_midway(spec, paths, out_dir, hooks):  # type: ignore[no-untyped-def]
        client.post(f"/v1/jobs/{spec.job_id}/cancel")
        return real_run(spec, paths, out_dir, hooks)

    monkeypatch.setattr(execution, "run_core", cancel_midway)
    job_id = client.post(
        "/v1/adapters/train",
        json={"model": "tiny", "version": 1, "task": "topics", "training": TINY_TRAINING},
    ).json()["id"]
    assert execution.execute_job(worker, job_id) == "cancelled"
    job = get_job(db, job_id)
    assert job.status == JobStatus.CANCELLED and job.result_adapter_id is None and job.finished_at


# --------------------------------------------------------------------------- claims and the reaper


def test_claims_and_the_reaper(client, db, recorder, worker, registry, settings):  # noqa: F811
    from app.jobs.reaper import run_maintenance

    job_id = client.post(
        "/v1/adapters/train", json={"model": "tiny", "version": 1, "task": "topics"}
    ).json()["id"]
    recorder.jobs.clear()

    def claim_as(name: str) -> bool:
        worker.worker = name
        return execution.claim_job(worker, job_id).claimed

    assert claim_as("host:1")
    assert not claim_as(
        "host:2"
    )  # RUNNING with a fresh heartbeat elsewhere: the message is a no-op
    report = run_maintenance(db.session_factory, settings)
    assert report.requeued == [] and get_job(db, job_id).status == JobStatus.RUNNING

    def later() -> dt.datetime:
        return utcnow() + dt.timedelta(seconds=settings.worker_lost_seconds + 1)

    report = run_maintenance(db.session_factory, settings, now=later())
    assert report.requeued == [job_id]
    job = get_job(db, job_id)
    assert job.status == JobStatus.QUEUED and job.worker is None and job.error_code == "WorkerLost"
    assert recorder.job_ids == [job_id]  # a fresh message

    assert claim_as("host:2") and get_job(db, job_id).attempts == 2
    assert claim_as("host:2")  # its own stale claim (a retried message): taken again
    assert get_job(db, job_id).attempts == 3
    report = run_maintenance(db.session_factory, settings, now=later())
    assert report.failed == [job_id]
    job = get_job(db, job_id)
    assert job.status == JobStatus.FAILED and job.error_code == "WorkerLost"
    assert "no attempts left" in (job.error_message or "")


def test_reaper_cancels_and_redispatches(client, db, recorder, worker, registry, settings):  # noqa: F811
    from app.jobs.reaper import run_maintenance

    first = client.post(
        "/v1/adapters/train", json={"model": "tiny", "version": 1, "task": "topics"}
    ).json()["id"]
    second = client.post(
        "/v1/adapters/train", json={"model": "tiny", "version": 1, "task": "topics"}
    ).json()["id"]
    assert execution.claim_job(worker, first).claimed
    with transaction(db.session_factory) as session:
        session.execute(sa.update(Job).where(Job.id == first).values(cancel_requested=True))
        session.execute(
            sa.update(Job).where(Job.id == second).values(dispatched_at=None)
        )  # send failed
    recorder.jobs.clear()
    report = run_maintenance(db.session_factory, settings)
    assert report.redispatched == [second] and recorder.job_ids == [second]
    later = utcnow() + dt.timedelta(seconds=settings.worker_lost_seconds + 1)
    report = run_maintenance(db.session_factory, settings, now=later)
    assert report.cancelled == [first] and get_job(db, first).status == JobStatus.CANCELLED


def test_broker_down_at_commit_is_recovered_by_the_reaper(
    client, db, recorder, registry, settings, store
):
    from app.context import install_context
    from app.jobs.reaper import run_maintenance

    class BrokerDown:
        def send_job(self, job_id, queue, *, countdown=None):  # type: ignore[no-untyped-def]
            raise ConnectionRefusedError("broker unreachable")

        def send_webhook_delivery(self, delivery_id, *, countdown=None):  # type: ignore[no-untyped-def]
            raise ConnectionRefusedError("broker unreachable")

    install_context(db.session_factory, settings, store, BrokerDown())
    response = client.post(
        "/v1/adapters/train", json={"model": "tiny", "version": 1, "task": "topics"}
    )
    assert response.status_code == 202  # the job is committed; only its message is missing
    job_id = response.json()["id"]
    assert get_job(db, job_id).dispatched_at is None

    install_context(db.session_factory, settings, store, recorder)
    report = run_maintenance(db.session_factory, settings)
    assert report.redispatched == [job_id] and recorder.job_ids == [job_id]
    assert get_job(db, job_id).dispatched_at is not None


def test_event_stream_sends_progress_then_a_final_status(client, db, recorder, registry):
    import anyio

    job_id = client.post(
        "/v1/adapters/train", json={"model": "tiny", "version": 1, "task": "topics"}
    ).json()["id"]

    def update(**values) -> None:  # type: ignore[no-untyped-def]
        with transaction(db.session_factory) as session:
            session.execute(sa.update(Job).where(Job.id == job_id).values(**values))

    async def follow() -> list[tuple[str, dict]]:  # type: ignore[type-arg]
        events = []
        stream = jobs_service.job_events(db.session_factory, job_id, poll_seconds=0.01)
        async for chunk in stream:
            lines = chunk.decode().strip().splitlines()
            events.append((lines[1].removeprefix("event: "), json.loads(lines[2][6:])))
            if len(events) == 1:
                update(
                    status=JobStatus.RUNNING, progress={"step": 3, "total": 10, "updated_at": "t1"}
                )
            elif len(events) == 2:
                update(status=JobStatus.SUCCEEDED)
        return events

    events = anyio.run(follow)
    assert [name for name, _ in events] == ["progress", "progress", "status"]
    assert events[0][1]["status"] == "QUEUED"
    assert events[1][1]["progress"]["step"] == 3
    assert events[2][1]["status"] == "SUCCEEDED"
