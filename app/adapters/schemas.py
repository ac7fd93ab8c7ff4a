"""Request and response bodies of ``/v1/adapters``."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.db import Adapter, AdapterStatus
from app.models.schemas import Alias, AliasChanges


class AdapterOut(BaseModel):
    id: str
    name: str | None
    model: str
    model_version: int
    model_version_id: int
    task: str
    task_id: int
    peft_type: str
    peft_config: dict[str, Any]
    label2id: dict[str, int] | None
    target_modules: list[str]
    status: AdapterStatus
    status_message: str | None
    artifact_uri: str | None
    fingerprint: str | None
    manifest: dict[str, str]
    size_bytes: int | None
    metrics: dict[str, Any]
    aliases: list[str]
    recycled_from: str | None = Field(description="id of the adapter this one was recycled from")
    method: str | None = Field(description="recycling method that produced it")
    job_id: str | None
    lineage_version: int
    created_at: dt.datetime
    updated_at: dt.datetime

    @model_validator(mode="before")
    @classmethod
    def _from_orm(cls, value: Any) -> Any:
        if isinstance(value, Adapter):
            return {
                "id": value.id,
                "name": value.name,
                "model": value.model_version.model.name,
                "model_version": value.model_version.version,
                "model_version_id": value.model_version_id,
                "task": value.task.name,
                "task_id": value.task_id,
                "peft_type": value.peft_type,
                "peft_config": value.peft_config,
                "label2id": value.label2id,
                "target_modules": value.target_modules,
                "status": value.status,
                "status_message": value.status_message,
                "artifact_uri": value.artifact_uri,
                "fingerprint": value.fingerprint,
                "manifest": value.manifest,
                "size_bytes": value.size_bytes,
                "metrics": value.metrics,
                "aliases": [alias.alias for alias in value.aliases],
                "recycled_from": value.recycled_from_id,
                "method": value.method,
                "job_id": value.job_id,
                "lineage_version": value.lineage_version,
                "created_at": value.created_at,
                "updated_at": value.updated_at,
            }
        return value


class AdapterUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=128)
    aliases: AliasChanges = Field(default_factory=AliasChanges)


__all__ = ["AdapterOut", "AdapterUpdate", "Alias"]
