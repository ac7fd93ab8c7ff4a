"""Response body of ``GET /v1/admin/overview``."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, Field


class QueueOut(BaseModel):
    name: str
    depth: int | None = Field(description="messages waiting in the broker; null: broker down")
    queued_jobs: int = Field(description="QUEUED job rows routed to this queue")
    running_jobs: int = Field(description="RUNNING job rows routed to this queue")


class BrokerOut(BaseModel):
    transport: str
    ok: bool
    error: str | None


class WorkerJobOut(BaseModel):
    id: str
    kind: str
    status: str
    campaign_id: str | None
    progress: dict[str, Any]
    heartbeat_at: dt.datetime | None


class WorkerOut(BaseModel):
    name: str
    state: str = Field(description="busy, idle, or lost (a RUNNING job with a stale heartbeat)")
    last_heartbeat_at: dt.datetime | None
    answered_broker: bool = Field(description="the worker answered celery inspect just now")
    running: list[WorkerJobOut]


class FailureOut(BaseModel):
    id: str
    kind: str
    campaign_id: str | None
    error_code: str | None
    error_message: str | None
    attempts: int
    finished_at: dt.datetime | None


class OverviewOut(BaseModel):
    generated_at: dt.datetime
    counts: dict[str, int] = Field(
        description="live models, versions, tasks, adapters; campaigns, reports, jobs"
    )
    jobs_by_status: dict[str, int]
    jobs_by_kind: dict[str, dict[str, int]] = Field(description="kind → status → count")
    adapters_by_status: dict[str, int]
    campaigns_by_status: dict[str, int]
    queues: list[QueueOut]
    broker: BrokerOut
    workers: list[WorkerOut]
    recent_failures: list[FailureOut]
