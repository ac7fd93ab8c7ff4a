"""Cancelling a job while it finishes: SUCCEEDED with its whole adapter, or CANCELLED without one.

Never both, never half: no CANCELLED job with an adapter row or files, no SUCCEEDED job without
them. The cancel runs as a real concurrent HTTP request (another thread, another connection) on
the SQLite registry, whose writers really exclude each other (the PostgreSQL fixture shares one
connection per test; the same race on PostgreSQL runs through real workers in
tests/faults/test_cancel_race_live.py).
"""

# ruff: noqa: F811  (the fixtures imported from engine_helpers are redefined as parameters)

from __future__ import annotations

import hashlib
import random
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from engine_helpers import get_job, recorder, registry, settings_overrides, worker  # noqa: F401

from app.db import Adapter, JobStatus
from app.jobs import execution

pytestmark = pytest.mark.parametrize("db", ["sqlite"], indirect=True)

TINY_TRAINING = {"steps": 4, "batch_size": 8, "learning_rate": 0.005, "eval_every": 2}


def _train(client) -> str:  # type: ignore[no-untyped-def]
    response = client.post(
        "/v1/adapters/train",
        json={"model": "tiny", "version": 1, "task": "topics", "training": TINY_TRAINING},
    )
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def assert_consistent(db, store, job_id: str) -> JobStatus:  # type: ignore[no-untyped-def]
    """The job's outcome and its adapter agree, rows and files alike."""
    job = get_job(db, job_id)
    with db.session() as session:
        adapters = session.scalars(sa.select(Adapter).where(Adapter.job_id == job_id)).all()
    produced = Path(store.root_path) / "adapters" / execution._produced_adapter_id(job_id)
    if job.status == JobStatus.SUCCEEDED:
        assert [a.id for a in adapters] == [job.result_adapter_id], job_id
        files = {
            p.relative_to(produced).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in produced.rglob("*")
            if p.is_file()
        }
        assert files == adapters[0].manifest, job_id
        assert job.result_report_id is not None
    else:
        assert job.status == JobStatus.CANCELLED, (job.status, job.error_message)
        assert job.result_adapter_id is None and adapters == [], job_id
        assert not produced.exists(), job_id
    assert not list(Path(store.root_path).rglob("*.tmp-*"))
    return JobStatus(job.status)


def test_cancel_arriving_while_the_outcome_is_written(
    client, db, store, recorder, worker, registry, monkeypatch
):  # type: ignore[no-untyped-def]
    real_store_report = execution.reports_service.store_report
    cancel: dict = {}  # type: ignore[type-arg]

    def store_report_while_a_cancel_arrives(session, report, **kwargs):  # type: ignore[no-untyped-def]
        def send() -> None:
            cancel["response"] = client.post(f"/v1/jobs/{job_id}/cancel")

        thread = threading.Thread(target=send)
        thread.start()
        thread.join(1.5)
        cancel["waited"] = thread.is_alive()  # it waits for the outcome's transaction
        cancel["thread"] = thread
        return real_store_report(session, report, **kwargs)

    monkeypatch.setattr(
        execution.reports_service, "store_report", store_report_while_a_cancel_arrives
    )
    job_id = _train(client)
    assert execution.execute_job(worker, job_id) == "succeeded"
    cancel["thread"].join(30)
    assert cancel["waited"], "the cancel did not overlap the outcome's transaction"
    response = cancel["response"]
    assert response.status_code == 409 and response.json()["error"] == "JobFinished"
    assert assert_consistent(db, store, job_id) == JobStatus.SUCCEEDED


def test_cancel_committed_just_before_the_outcome(
    client, db, store, recorder, worker, registry, monkeypatch
):  # type: ignore[no-untyped-def]
    real_run = execution.run_core
    responses = []

    def run_then_cancel(spec, paths, out_dir, hooks):  # type: ignore[no-untyped-def]
        report = real_run(spec, paths, out_dir, hooks)
        responses.append(client.post(f"/v1/jobs/{spec.job_id}/cancel"))
        return report

    monkeypatch.setattr(execution, "run_core", run_then_cancel)
    job_id = _train(client)
    outcome = execution.execute_job(worker, job_id)
    [response] = responses
    assert response.status_code == 202 and response.json()["cancel_requested"] is True
    status = assert_consistent(db, store, job_id)
    assert outcome == {"succeeded": "succeeded", "cancelled": "cancelled"}[outcome]
    assert status == (JobStatus.SUCCEEDED if outcome == "succeeded" else JobStatus.CANCELLED)


def test_cancels_at_random_moments_leave_every_job_consistent(
    client, db, store, recorder, worker, registry
):  # type: ignore[no-untyped-def]
    rng = random.Random(20261126)
    assert execution.execute_job(worker, _train(client)) == "succeeded"  # warm caches
    measured = _train(client)
    started = time.monotonic()
    assert execution.execute_job(worker, measured) == "succeeded"
    duration = time.monotonic() - started  # aim the cancels around the moment a job finishes
    outcomes = []
    for _ in range(6):
        job_id = _train(client)
        runner = threading.Thread(
            target=lambda j=job_id: outcomes.append(execution.execute_job(worker, j))
        )
        runner.start()
        time.sleep(rng.uniform(0.0, 1.0) * duration)
        response = client.post(f"/v1/jobs/{job_id}/cancel")
        assert response.status_code in (202, 409), response.text
        if response.status_code == 409:
            assert response.json()["error"] == "JobFinished"
        runner.join(120)
        assert not runner.is_alive()
        assert_consistent(db, store, job_id)
    assert len(outcomes) == 6  # each either "succeeded" or "cancelled", both consistent
