"""Recycling policies, campaigns, jobs and their reports."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import (
    Base,
    CampaignStatus,
    JobKind,
    JobQueue,
    JobStatus,
    JSONType,
    enum_column,
    new_uuid,
    utcnow,
)


class Policy(Base):
    """How a model's adapters are recycled on upgrade, and the gates a result must pass."""

    __tablename__ = "policies"

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(
        sa.ForeignKey("models.id", ondelete="CASCADE"), unique=True
    )
    methods: Mapped[list[str]] = mapped_column(JSONType, default=list)
    step_budget: Mapped[int]
    fresh_baseline: Mapped[bool] = mapped_column(default=False)
    few_shot: Mapped[int | None]
    """Labelled examples per class for recycling; none: the whole train split."""
    gates: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    """e.g. {"direct_min_retention": 0.98, "recycled_min_metric": 0.8, "must_beat_fresh": true}."""
    training: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    """Overrides of the recycling runs' TrainingConfig (learning_rate, batch_size, seed…)."""
    auto_campaign: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Campaign(Base):
    """The recycling of a model's adapters from one version to its upgrade."""

    __tablename__ = "campaigns"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True, default=new_uuid)
    model_id: Mapped[int] = mapped_column(
        sa.ForeignKey("models.id", ondelete="RESTRICT"), index=True
    )
    from_version_id: Mapped[int] = mapped_column(
        sa.ForeignKey("model_versions.id", ondelete="RESTRICT")
    )
    to_version_id: Mapped[int] = mapped_column(
        sa.ForeignKey("model_versions.id", ondelete="RESTRICT")
    )
    policy: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    """Snapshot of the policy (or the request's overrides) the campaign runs under."""
    trigger: Mapped[str] = mapped_column(sa.String(32), default="manual")
    status: Mapped[CampaignStatus] = mapped_column(
        enum_column(CampaignStatus, "campaign_status"), default=CampaignStatus.PENDING, index=True
    )
    summary: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow, index=True)
    started_at: Mapped[dt.datetime | None]
    finished_at: Mapped[dt.datetime | None]


class Job(Base):
    """One unit of long work run by a worker: training, compatibility, recycling, analysis."""

    __tablename__ = "jobs"
    __table_args__ = (
        sa.Index("ix_jobs_status_queue", "status", "queue"),
        # A campaign creates each of its jobs once, whatever retries or races happen.
        sa.UniqueConstraint("campaign_id", "campaign_key"),
    )

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True, default=new_uuid)
    kind: Mapped[JobKind] = mapped_column(enum_column(JobKind, "job_kind"))
    queue: Mapped[JobQueue] = mapped_column(enum_column(JobQueue, "job_queue"))
    status: Mapped[JobStatus] = mapped_column(
        enum_column(JobStatus, "job_status"), default=JobStatus.QUEUED
    )
    params: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    """Input ids, method, steps, seed…"""
    campaign_id: Mapped[str | None] = mapped_column(
        sa.ForeignKey("campaigns.id", ondelete="SET NULL"), index=True
    )
    campaign_key: Mapped[str | None] = mapped_column(sa.String(160))
    """The job's role in its campaign (``recycle:<adapter>:<method>``)."""
    progress: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    """{"step", "total", "metrics", "eta_seconds", "updated_at"}."""
    attempts: Mapped[int] = mapped_column(default=0)
    max_attempts: Mapped[int] = mapped_column(default=3)
    worker: Mapped[str | None] = mapped_column(sa.String(255))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow, index=True)
    started_at: Mapped[dt.datetime | None]
    finished_at: Mapped[dt.datetime | None]
    heartbeat_at: Mapped[dt.datetime | None]
    dispatched_at: Mapped[dt.datetime | None]
    """When its queue message was last sent; none: sending failed and the reaper re-sends."""
    cost: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    error_code: Mapped[str | None] = mapped_column(sa.String(64))
    error_message: Mapped[str | None] = mapped_column(sa.Text)
    # adapters and reports point back at jobs, so these two foreign keys are added after the
    # three tables exist (use_alter).
    result_adapter_id: Mapped[str | None] = mapped_column(
        sa.ForeignKey("adapters.id", ondelete="SET NULL", use_alter=True)
    )
    result_report_id: Mapped[str | None] = mapped_column(
        sa.ForeignKey("reports.id", ondelete="SET NULL", use_alter=True)
    )
    cancel_requested: Mapped[bool] = mapped_column(default=False)


class Report(Base):
    """The metrics of a job as a versioned JSON document (DESIGN §7)."""

    __tablename__ = "reports"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True, default=new_uuid)
    job_id: Mapped[str | None] = mapped_column(
        sa.ForeignKey("jobs.id", ondelete="SET NULL"), index=True
    )
    kind: Mapped[str] = mapped_column(sa.String(32))
    schema_version: Mapped[str] = mapped_column(sa.String(16))
    document: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow, index=True)
