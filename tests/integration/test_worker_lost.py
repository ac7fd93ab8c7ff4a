"""A worker SIGKILLed in the middle of a recycle job: the job is re-queued by the reaper, a new
worker resumes it from its checkpoint and it SUCCEEDS; never RUNNING forever, and no
half-written adapter row or artifact. On both stacks: the embedded one (its broker never
redelivers) and PostgreSQL + Redis (which redelivers only after its visibility timeout, an hour):
either way the reaper notices the stale heartbeat and re-queues the job.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from worker_helpers import Stack, register_basics, register_v2, wait_for

from app.db import Adapter
from recycling_core.batched_training import STATE_NAME as BATCHED_STATE_NAME

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_killed_worker_job_is_resumed_elsewhere(stack: Stack, api, tiny) -> None:  # type: ignore[no-untyped-def]
    basics = register_basics(api, tiny)
    assert api.put("/v1/models/tiny/policy", json={"auto_campaign": False}).status_code == 200
    v2 = register_v2(api, tiny)
    body = {
        "kind": "recycle",
        "params": {
            "adapter_id": basics["adapter"]["id"],
            "to_version_id": v2["id"],
            "method": "init",
            "training": {
                "steps": 200,
                "batch_size": 16,
                "learning_rate": 0.005,
                "eval_every": 50,
                "checkpoint_every": 10,
            },
        },
    }
    job_id = api.post("/v1/jobs", json=body).json()["id"]
    first = stack.start_worker("first")
    checkpoint = stack.data_dir / "checkpoints" / job_id / BATCHED_STATE_NAME

    def training_with_checkpoint():  # type: ignore[no-untyped-def]
        job = api.get(f"/v1/jobs/{job_id}").json()
        return (
            job
            if job["status"] == "RUNNING"
            and checkpoint.exists()
            and job["progress"].get("step", 0) >= 20
            else None
        )

    running = wait_for(
        training_with_checkpoint, 120, "the job to train past a checkpoint", stack, interval=0.2
    )
    assert running["attempts"] == 1
    stack.kill(first)  # SIGKILL: no warm shutdown, no ack, no outcome written

    lost = api.get(f"/v1/jobs/{job_id}").json()
    assert lost["status"] == "RUNNING" and lost["progress"]["step"] < 200
    stack.start_worker("second")

    def finished():  # type: ignore[no-untyped-def]
        job = api.get(f"/v1/jobs/{job_id}").json()
        return job if job["status"] in ("SUCCEEDED", "FAILED", "CANCELLED") else None

    job = wait_for(finished, 150, "the job to end after the worker was killed", stack)
    assert job["status"] == "SUCCEEDED", (job, stack.worker_logs())
    assert job["attempts"] == 2 and job["worker"] != running["worker"]
    assert job["progress"].get("resumed_from_step", 0) >= 10, job[
        "progress"
    ]  # resumed, not restarted

    # Exactly one adapter for the job, complete on disk; no leftovers of the killed attempt.
    from app.db.session import create_db_engine

    engine = create_db_engine(stack.database_url)
    with engine.connect() as connection:
        adapters = (
            connection.execute(sa.select(Adapter.id).where(Adapter.job_id == job_id))
            .scalars()
            .all()
        )
    engine.dispose()
    assert adapters == [job["result_adapter_id"]]
    stored = sorted(path.name for path in (stack.data_dir / "artifacts" / "adapters").iterdir())
    assert stored == sorted([basics["adapter"]["id"], job["result_adapter_id"]])
    assert not (stack.data_dir / "checkpoints" / job_id).exists()
