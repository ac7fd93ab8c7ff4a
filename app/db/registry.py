"""Registered models, their versions, version tags and aliases (MLflow-style registry)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.db.base import SHA256, Base, JSONType, VersionStatus, enum_column, utcnow


class RegisteredModel(Base):
    """A model family (``minilm``); its versions are upgrades of one another."""

    __tablename__ = "models"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(128), unique=True)
    description: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    deleted_at: Mapped[dt.datetime | None]

    aliases: Mapped[list[ModelAlias]] = relationship(
        back_populates="model", cascade="all, delete-orphan", passive_deletes=True
    )


class ModelVersion(Base):
    """One immutable version of a model: its files, fingerprint and architecture signature."""

    __tablename__ = "model_versions"
    __table_args__ = (
        sa.UniqueConstraint("model_id", "version"),
        sa.Index("ix_model_versions_model_id_status", "model_id", "status"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(sa.ForeignKey("models.id", ondelete="RESTRICT"))
    version: Mapped[int]
    parent_version_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("model_versions.id", ondelete="RESTRICT"), index=True
    )
    description: Mapped[str | None] = mapped_column(sa.Text)
    status: Mapped[VersionStatus] = mapped_column(
        enum_column(VersionStatus, "version_status"), default=VersionStatus.PENDING
    )
    status_message: Mapped[str | None] = mapped_column(sa.Text)
    artifact_uri: Mapped[str | None] = mapped_column(sa.String(1024))
    manifest: Mapped[dict[str, str]] = mapped_column(JSONType, default=dict)
    """Relative file path → sha256 of every file of the artifact."""
    fingerprint: Mapped[str | None] = mapped_column(SHA256, index=True)
    signature: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    """Architecture signature: model type, kind, config dims, tokenizer vocabulary hash."""
    model_class: Mapped[str | None] = mapped_column(sa.String(128))
    size_bytes: Mapped[int | None] = mapped_column(sa.BigInteger)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    deleted_at: Mapped[dt.datetime | None]

    model: Mapped[RegisteredModel] = relationship()
    parent: Mapped[ModelVersion | None] = relationship(remote_side=[id])
    tags: Mapped[list[ModelVersionTag]] = relationship(
        cascade="all, delete-orphan", passive_deletes=True, order_by="ModelVersionTag.key"
    )
    aliases: Mapped[list[ModelAlias]] = relationship(viewonly=True, order_by="ModelAlias.alias")


class ModelVersionTag(Base):
    """A key/value tag of a model version."""

    __tablename__ = "model_version_tags"

    model_version_id: Mapped[int] = mapped_column(
        sa.ForeignKey("model_versions.id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(sa.String(250), primary_key=True)
    value: Mapped[str] = mapped_column(sa.Text)


class ModelAlias(Base):
    """A named pointer (``production``, ``latest``) to one version of a model; it can move."""

    __tablename__ = "model_aliases"

    model_id: Mapped[int] = mapped_column(
        sa.ForeignKey("models.id", ondelete="CASCADE"), primary_key=True
    )
    alias: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    model_version_id: Mapped[int] = mapped_column(
        sa.ForeignKey("model_versions.id", ondelete="CASCADE"), index=True
    )
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    model: Mapped[RegisteredModel] = relationship(back_populates="aliases")
    version: Mapped[ModelVersion] = relationship()
