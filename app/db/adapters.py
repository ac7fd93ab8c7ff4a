"""Adapters (PEFT adapters or full fine-tuning deltas) with their lineage and aliases."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.db.base import SHA256, AdapterStatus, Base, JSONType, enum_column, new_uuid, utcnow
from app.db.registry import ModelVersion
from app.db.tasks import Task


class Adapter(Base):
    """Adapted weights for one task on one model version."""

    __tablename__ = "adapters"
    __table_args__ = (
        sa.Index("ix_adapters_model_version_id_task_id", "model_version_id", "task_id"),
    )

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True, default=new_uuid)
    name: Mapped[str | None] = mapped_column(sa.String(128))
    task_id: Mapped[int] = mapped_column(sa.ForeignKey("tasks.id", ondelete="RESTRICT"), index=True)
    model_version_id: Mapped[int] = mapped_column(
        sa.ForeignKey("model_versions.id", ondelete="RESTRICT")
    )
    peft_type: Mapped[str] = mapped_column(sa.String(32))
    peft_config: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    label2id: Mapped[dict[str, int] | None] = mapped_column(JSONType)
    target_modules: Mapped[list[str]] = mapped_column(JSONType, default=list)
    artifact_uri: Mapped[str | None] = mapped_column(sa.String(1024))
    manifest: Mapped[dict[str, str]] = mapped_column(JSONType, default=dict)
    fingerprint: Mapped[str | None] = mapped_column(SHA256, index=True)
    size_bytes: Mapped[int | None] = mapped_column(sa.BigInteger)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    status: Mapped[AdapterStatus] = mapped_column(
        enum_column(AdapterStatus, "adapter_status"), default=AdapterStatus.PENDING, index=True
    )
    status_message: Mapped[str | None] = mapped_column(sa.Text)
    # Lineage: where this adapter came from when a job recycled or trained it.
    recycled_from_id: Mapped[str | None] = mapped_column(
        sa.ForeignKey("adapters.id", ondelete="RESTRICT"), index=True
    )
    method: Mapped[str | None] = mapped_column(sa.String(32))
    job_id: Mapped[str | None] = mapped_column(
        sa.ForeignKey("jobs.id", ondelete="SET NULL"), index=True
    )
    lineage_version: Mapped[int] = mapped_column(default=1)
    """1 for an uploaded adapter, parent's + 1 for each recycling step."""
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    deleted_at: Mapped[dt.datetime | None]

    task: Mapped[Task] = relationship()
    model_version: Mapped[ModelVersion] = relationship()
    recycled_from: Mapped[Adapter | None] = relationship(remote_side=[id])
    aliases: Mapped[list[AdapterAlias]] = relationship(viewonly=True, order_by="AdapterAlias.alias")


class AdapterAlias(Base):
    """A named pointer (``production``) to the adapter serving a task on a model version."""

    __tablename__ = "adapter_aliases"

    model_version_id: Mapped[int] = mapped_column(
        sa.ForeignKey("model_versions.id", ondelete="CASCADE"), primary_key=True
    )
    task_id: Mapped[int] = mapped_column(
        sa.ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True
    )
    alias: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    adapter_id: Mapped[str] = mapped_column(
        sa.ForeignKey("adapters.id", ondelete="CASCADE"), index=True
    )
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    adapter: Mapped[Adapter] = relationship()
