"""The Redis broker crashes and comes back (empty: no persistence) in the middle of a campaign.

A real API server (uvicorn, with its reaper) and a real Celery worker run on a fresh PostgreSQL
database and a private redis-server. Once the campaign's first job is running, Redis is killed
(every queued and unacknowledged message is gone) and started again on the same port. The
worker reconnects, the API's reaper notices the broker restarted and sends the messages of the
QUEUED jobs again, and the campaign completes: every job SUCCEEDED, none lost or stuck, every
recycled adapter stored whole.
"""

from __future__ import annotations

import hashlib
import time

import httpx
import pytest
from live_stack import (
    create_api_key,
    service_env,
    split_files,
    start_worker,
    stop_process,
    tar_gz,
    task_labels,
    wait_until,
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(400)]

FAST_ENGINE = {
    "RECYCLE_PROGRESS_THROTTLE_SECONDS": "0.2",
    "RECYCLE_HEARTBEAT_SECONDS": "1",
    "RECYCLE_WORKER_LOST_SECONDS": "6",
    "RECYCLE_REAPER_INTERVAL_SECONDS": "1",
    "RECYCLE_JOB_RETRY_BACKOFF_SECONDS": "1",
    # one job per message: the restart must find jobs still waiting in the queue (a worker that
    # takes queued companions into one batched pass would leave none there)
    "RECYCLE_BATCH_MAX_ADAPTERS": "1",
}
POLICY = {
    "methods": ["init"],
    "step_budget": 30,
    "fresh_baseline": True,
    "gates": {"direct_min_retention": None},
    "training": {"learning_rate": 0.005, "batch_size": 16, "eval_every": 10},
}


def test_campaign_completes_when_redis_restarts_midway(
    pg_url, private_redis, start_server, tiny, tmp_path
):  # type: ignore[no-untyped-def]
    server = start_server(pg_url, private_redis.url, **FAST_ENGINE)
    key = create_api_key(pg_url)
    api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    assert api.post("/v1/models", json={"name": "tiny"}).status_code == 201
    v1 = api.post(
        "/v1/models/tiny/versions",
        files={"file": ("v1.tar.gz", tar_gz(tiny["v1"]), "application/gzip")},
    )
    assert v1.status_code == 201, v1.text
    task = api.post(
        "/v1/tasks",
        data={"name": "topics", "labels": task_labels(tiny["task"])},
        files=split_files(tiny["task"]),
    )
    assert task.status_code == 201, task.text
    source = api.post(
        "/v1/adapters",
        data={"model": "tiny", "version": "1", "task": "topics"},
        files={"file": ("a.tar.gz", tar_gz(tiny["adapter"]), "application/gzip")},
    )
    assert source.status_code == 201, source.text
    assert api.put("/v1/models/tiny/policy", json=POLICY).status_code == 200

    env = service_env(tmp_path / "data", pg_url, private_redis.url, **FAST_ENGINE)
    worker = start_worker(env, tmp_path / "worker.log")
    try:
        v2 = api.post(
            "/v1/models/tiny/versions",
            data={"parent_version": "1"},
            files={"file": ("v2.tar.gz", tar_gz(tiny["v2"]), "application/gzip")},
        )
        assert v2.status_code == 201, v2.text
        [campaign] = api.get("/v1/campaigns", params={"model": "tiny"}).json()["items"]

        def jobs() -> list[dict]:  # type: ignore[type-arg]
            return api.get(f"/v1/campaigns/{campaign['id']}").json()["jobs"]

        def a_recycle_job_runs() -> bool:
            return any(j["kind"] == "recycle" and j["status"] == "RUNNING" for j in jobs())

        wait_until(a_recycle_job_runs, 180, "a recycle job of the campaign to run")
        queued_before = [j["id"] for j in jobs() if j["status"] == "QUEUED"]
        private_redis.stop()  # SIGKILL, no persistence: every message in the broker is gone
        time.sleep(3)
        private_redis.start()

        def finished() -> dict | None:  # type: ignore[type-arg]
            body = api.get(f"/v1/campaigns/{campaign['id']}").json()
            return body if body["status"] not in ("PENDING", "RUNNING") else None

        try:
            result = wait_until(finished, 240, "the campaign to finish after the restart", 1)
        except TimeoutError:
            pytest.fail(
                f"campaign stuck: {jobs()}\n--- worker\n"
                + (tmp_path / "worker.log").read_text()[-6000:]
                + "\n--- server\n"
                + server.logs()
            )
        assert result["status"] == "SUCCEEDED", result
        assert queued_before, "the restart must have hit jobs still waiting in the queue"
        kinds = sorted((j["kind"], j["params"].get("method") or "") for j in result["jobs"])
        assert kinds == [
            ("compatibility", ""),
            ("interpolation", ""),
            ("recycle", "fresh"),
            ("recycle", "init"),
        ]
        assert all(j["status"] == "SUCCEEDED" for j in result["jobs"]), result["jobs"]
        recycled = api.get("/v1/adapters", params={"model": "tiny", "version": 2}).json()["items"]
        assert {a["method"] for a in recycled} == {"init", "fresh"}
        for adapter in recycled:
            directory = tmp_path / "data" / "artifacts" / "adapters" / adapter["id"]
            stored = {
                p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in directory.rglob("*")
                if p.is_file()
            }
            assert stored == adapter["manifest"]
    finally:
        stop_process(worker)
