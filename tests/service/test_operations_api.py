"""Operators' API on SQLite and PostgreSQL: job retry (and the campaign it reopens), the admin
overview, Prometheus metrics, request ids and structured log lines."""

# ruff: noqa: F811  (the fixtures imported from engine_helpers are redefined as parameters)

from __future__ import annotations

import io
import json
import logging
import os
import random
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from engine_helpers import (  # noqa: F401  (fixtures)
    compatibility_report,
    finish_job,
    get_job,
    job_rows,
    recorder,
    register_v2,
    registry,
    settings_overrides,
    worker,
)

from app.db import Campaign, JobStatus, Role
from app.jobs import execution
from app.observability.logs import ContextFilter, JsonFormatter, job_context
from app.observability.metrics import parse_samples, sample

RECYCLE_ONLY = {
    "methods": ["init"],
    "step_budget": 4,
    "fresh_baseline": False,
    "gates": {"direct_min_retention": None},
}


def _campaign_status(db) -> str:  # type: ignore[no-untyped-def]
    with db.session() as session:
        return str(session.scalars(sa.select(Campaign.status)).one())


# --------------------------------------------------------------------------- retry


def test_retry_requeues_a_failed_job_and_reopens_its_campaign(
    client, db, store, recorder, registry, tiny_model_v2_dir, make_key
):
    client.put("/v1/models/tiny/policy", json=RECYCLE_ONLY)
    register_v2(client, tiny_model_v2_dir)
    [compat] = job_rows(db)
    finish_job(db, store, compat.id, JobStatus.FAILED, error="the disk was full")
    assert _campaign_status(db) == "FAILED"
    before = get_job(db, compat.id)
    sent = len(recorder.jobs)

    reader = {"Authorization": f"Bearer {make_key(Role.READER)}"}
    assert client.post(f"/v1/jobs/{compat.id}/retry", headers=reader).status_code == 403
    response = client.post(f"/v1/jobs/{compat.id}/retry")
    assert response.status_code == 202, response.text
    retried = response.json()
    assert retried["id"] == compat.id and retried["status"] == "QUEUED"
    assert retried["error_code"] is None and retried["finished_at"] is None
    assert retried["max_attempts"] > before.attempts
    assert retried["progress"]["retried_from"]["error_message"] == "the disk was full"
    assert recorder.job_ids[sent:] == [compat.id]  # its message went out after commit
    assert _campaign_status(db) == "RUNNING"

    again = client.post(f"/v1/jobs/{compat.id}/retry")
    assert again.status_code == 409 and again.json()["error"] == "JobNotRetryable"
    assert client.post("/v1/jobs/nope/retry").status_code == 404

    # The retried run succeeds with a low retention: the campaign goes on to recycling.
    finish_job(
        db,
        store,
        compat.id,
        JobStatus.SUCCEEDED,
        compatibility_report(compat.id, source=0.9, direct=0.5),
    )
    kinds = sorted(job.kind.value for job in job_rows(db))
    assert kinds == ["compatibility", "recycle"] and _campaign_status(db) == "RUNNING"


def test_retry_a_cancelled_job_runs_it(client, db, recorder, worker, registry):
    job = client.post(
        "/v1/adapters/train",
        json={"model": "tiny", "version": 1, "task": "topics", "training": {"steps": 2}},
    ).json()
    assert client.post(f"/v1/jobs/{job['id']}/cancel").json()["status"] == "CANCELLED"
    assert execution.execute_job(worker, job["id"]).startswith("skipped")
    assert client.post(f"/v1/jobs/{job['id']}/retry").json()["status"] == "QUEUED"
    assert execution.execute_job(worker, job["id"]) == "succeeded"
    assert get_job(db, job["id"]).result_adapter_id is not None


# --------------------------------------------------------------------------- overview


def test_admin_overview(client, db, store, recorder, worker, registry, make_key, tiny_model_v2_dir):
    client.put("/v1/models/tiny/policy", json=RECYCLE_ONLY)
    register_v2(client, tiny_model_v2_dir)
    [compat] = job_rows(db)
    running = client.post(
        "/v1/adapters/train", json={"model": "tiny", "version": 1, "task": "topics"}
    ).json()
    worker.worker = "gpu-host:41"
    assert execution.claim_job(worker, running["id"]).claimed
    finish_job(db, store, compat.id, JobStatus.FAILED, error="module query does not fit")

    assert client.get("/v1/admin/overview", headers={"Authorization": ""}).status_code == 401
    reader = {"Authorization": f"Bearer {make_key(Role.READER)}"}
    response = client.get("/v1/admin/overview", headers=reader)
    assert response.status_code == 200, response.text
    overview = response.json()
    assert overview["counts"]["models"] == 1 and overview["counts"]["versions"] == 2
    assert overview["counts"]["adapters"] == 1 and overview["counts"]["campaigns"] == 1
    assert overview["jobs_by_status"]["RUNNING"] == 1 and overview["jobs_by_status"]["FAILED"] == 1
    assert overview["jobs_by_kind"]["train"]["RUNNING"] == 1
    assert overview["campaigns_by_status"] == {"FAILED": 1}
    queues = {queue["name"]: queue for queue in overview["queues"]}
    assert set(queues) == {"gpu", "cpu"} and queues["gpu"]["running_jobs"] == 1
    assert overview["broker"]["transport"] == "sqlalchemy"
    [busy] = [w for w in overview["workers"] if w["name"] == "gpu-host:41"]
    assert busy["state"] == "busy" and [j["id"] for j in busy["running"]] == [running["id"]]
    [failure] = overview["recent_failures"]
    assert failure["id"] == compat.id and "does not fit" in failure["error_message"]


# --------------------------------------------------------------------------- metrics


def test_metrics_need_a_key_and_count_jobs_and_requests(
    client, db, store, recorder, registry, tiny_model_v2_dir
):
    assert client.get("/metrics", headers={"Authorization": ""}).status_code == 401
    client.put("/v1/models/tiny/policy", json=RECYCLE_ONLY)
    register_v2(client, tiny_model_v2_dir)
    [compat] = job_rows(db)
    before = parse_samples(client.get("/metrics").text)
    assert sample(before, "recycle_jobs", kind="compatibility", status="QUEUED") == 1
    assert sample(before, "recycle_registry_up") == 1

    finish_job(
        db,
        store,
        compat.id,
        JobStatus.SUCCEEDED,
        compatibility_report(compat.id, source=0.9, direct=0.5),
    )
    client.get(f"/v1/jobs/{compat.id}")
    response = client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    after = parse_samples(response.text)
    assert sample(after, "recycle_jobs", kind="compatibility", status="SUCCEEDED") == 1
    assert (
        sample(after, "recycle_jobs_finished_total", kind="compatibility", status="SUCCEEDED") == 1
    )
    assert sample(after, "recycle_jobs", kind="recycle", status="QUEUED") == 1
    assert sample(after, "recycle_registry_objects", kind="models") == 1
    route = {"method": "GET", "route": "/v1/jobs/{job_id}", "status": "200"}
    assert sample(after, "recycle_http_requests_total", **route) >= 1
    assert sample(after, "recycle_http_request_duration_seconds_count", **route) >= 1
    assert ("recycle_queue_depth", (("queue", "gpu"),)) in after


def test_metrics_can_be_public(client, settings):
    settings.metrics_public = True
    response = client.get("/metrics", headers={"Authorization": ""})
    assert response.status_code == 200 and "recycle_jobs" in response.text


# --------------------------------------------------------------------------- request ids and logs


def test_request_ids_are_echoed_and_logged(client):
    handler_stream = io.StringIO()
    handler = logging.StreamHandler(handler_stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    access = logging.getLogger("app.access")
    access.addHandler(handler)
    previous_level = access.level
    access.setLevel(logging.INFO)
    try:
        mine = client.get("/v1/models", headers={"X-Request-ID": "trace-42"})
        fresh = client.get("/v1/models/none")
        odd = client.get("/healthz", headers={"X-Request-ID": "bad id with spaces"})
    finally:
        access.removeHandler(handler)
        access.setLevel(previous_level)
    assert mine.headers["x-request-id"] == "trace-42"
    assert fresh.status_code == 404 and len(fresh.headers["x-request-id"]) == 32
    assert odd.headers["x-request-id"] != "bad id with spaces"
    lines = [json.loads(line) for line in handler_stream.getvalue().splitlines()]
    [traced] = [line for line in lines if line.get("request_id") == "trace-42"]
    assert traced["route"] == "/v1/models" and traced["status"] == 200
    assert traced["logger"] == "app.access" and "duration_ms" in traced and "ts" in traced


def test_job_ids_reach_log_lines():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    logger = logging.getLogger("tests.observability")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with job_context("job-123"):
            logger.info("step %d", 5, extra={"phase": "train"})
        logger.info("outside")
    finally:
        logger.removeHandler(handler)
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside == {
        **inside,
        "message": "step 5",
        "job_id": "job-123",
        "phase": "train",
        "level": "INFO",
    }
    assert "job_id" not in outside


# --------------------------------------------------------------------------- broker and workers

REDIS_URL = os.environ.get("RECYCLE_TEST_REDIS_URL", "redis://127.0.0.1:6379")


@pytest.fixture
def redis_broker_url() -> Iterator[str]:
    """An empty database of the real Redis (skipped locally, required in CI)."""
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except redis.exceptions.RedisError as error:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"Redis is required in CI: {error}")
        pytest.skip(f"Redis unreachable: {error}")
    index = next(
        (
            i
            for i in random.sample(range(1, 16), 15)
            if redis.Redis.from_url(f"{REDIS_URL}/{i}").dbsize() == 0
        ),
        None,
    )
    if index is None:
        pytest.skip("Redis databases 1-15 are all in use")
    try:
        yield f"{REDIS_URL}/{index}"
    finally:
        redis.Redis.from_url(f"{REDIS_URL}/{index}").flushdb()


def test_workers_join_job_rows_and_broker_answers():
    import datetime as dt

    from app.admin.service import _workers
    from app.db import Job, JobKind, utcnow

    now = utcnow()
    busy = Job(
        id="job-a",
        kind=JobKind.TRAIN,
        status=JobStatus.RUNNING,
        worker="host:1",
        heartbeat_at=now,
        progress={"step": 3, "total": 9},
    )
    stale = Job(
        id="job-b",
        kind=JobKind.RECYCLE,
        status=JobStatus.RUNNING,
        worker="host:2",
        heartbeat_at=now - dt.timedelta(minutes=10),
        progress={},
    )
    done = Job(
        id="job-c",
        kind=JobKind.TRAIN,
        status=JobStatus.SUCCEEDED,
        worker="host:3",
        heartbeat_at=now - dt.timedelta(minutes=5),
        progress={},
    )
    workers = _workers(
        [busy, stale, done],
        {"gpu0@host": ["job-a"], "cpu@host": []},
        now - dt.timedelta(minutes=2),
    )
    states = {w.name: (w.state, w.answered_broker, [j.id for j in w.running]) for w in workers}
    assert states == {
        "gpu0@host (host:1)": ("busy", True, ["job-a"]),
        "host:2": ("lost", False, ["job-b"]),
        "host:3": ("idle", False, []),
        "cpu@host": ("idle", True, []),
    }
    assert [w.state for w in workers] == ["busy", "lost", "idle", "idle"]


@pytest.mark.redis
def test_queue_depth_from_redis(redis_broker_url: str) -> None:
    from app.admin.broker import BrokerStats
    from app.queue import create_celery_app
    from app.settings import Settings

    celery = create_celery_app(Settings(broker_url=redis_broker_url))
    stats = BrokerStats(celery, ttl_seconds=0)
    assert stats.transport == "redis"
    assert stats.queue_depths().depths == {"gpu": 0, "cpu": 0}
    for _ in range(3):
        celery.send_task(
            "recycle.run_job", args=["nobody-runs-this"], queue="gpu", routing_key="gpu"
        )
    depths = stats.queue_depths()
    assert depths.error is None and depths.depths == {"gpu": 3, "cpu": 0}
    assert stats.workers() == []  # no worker consumes this database


def test_queue_depth_when_the_broker_is_down():
    from app.admin.broker import BrokerStats
    from app.queue import create_celery_app
    from app.settings import Settings

    stats = BrokerStats(create_celery_app(Settings(broker_url="redis://127.0.0.1:1/0")))
    depths = stats.queue_depths()
    assert depths.depths == {"gpu": None, "cpu": None} and depths.error
