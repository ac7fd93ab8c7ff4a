"""Tasks: labelled datasets (train/dev/test splits) stored as artifacts."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import SHA256, Base, JSONType, TaskKind, enum_column, utcnow


class Task(Base):
    """A task: its kind, label set, metric and the stored dataset splits."""

    __tablename__ = "tasks"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(128), unique=True)
    kind: Mapped[TaskKind] = mapped_column(enum_column(TaskKind, "task_kind"))
    labels: Mapped[list[str] | None] = mapped_column(JSONType)
    metric: Mapped[str] = mapped_column(sa.String(32))
    description: Mapped[str | None] = mapped_column(sa.Text)
    artifact_uri: Mapped[str] = mapped_column(sa.String(1024))
    manifest: Mapped[dict[str, str]] = mapped_column(JSONType, default=dict)
    fingerprint: Mapped[str] = mapped_column(SHA256)
    splits: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    """Split name → {"uri", "file", "sha256", "examples"}."""
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    deleted_at: Mapped[dt.datetime | None]
