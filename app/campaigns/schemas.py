"""Request and response bodies of ``/v1/models/{model}/policy`` and ``/v1/campaigns``."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.db import CampaignStatus
from app.db.base import INT_MAX
from app.jobs.schemas import JobOut, RecycleMethodName, TrainingParams


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Gates(_Strict):
    """When a campaign moves the ``production`` alias of a task on the new version."""

    direct_min_retention: float | None = Field(
        default=0.98,
        ge=0,
        le=10,
        description="promote the outdated adapter as is (method direct, no training) when its "
        "retention on the new version is at least this; null: never",
    )
    recycled_min_metric: float | None = Field(
        default=None, description="the best recycled adapter's test metric must reach this"
    )
    must_beat_fresh: bool = Field(
        default=False,
        description="the best recycled adapter must score at least the fresh baseline",
    )


def _unique_methods(methods: list[str]) -> list[str]:
    if len(set(methods)) != len(methods):
        raise ValueError("methods must not repeat")
    return methods


def _default_methods() -> list[RecycleMethodName]:
    return ["init"]


class PolicyIn(_Strict):
    """A model's recycling policy; omitted fields take the defaults."""

    methods: list[RecycleMethodName] = Field(default_factory=_default_methods, min_length=1)
    step_budget: int = Field(
        default=200, ge=1, le=10_000_000, description="training steps per method"
    )
    few_shot: int | None = Field(
        default=None, ge=1, le=INT_MAX, description="labelled examples per class"
    )
    fresh_baseline: bool = Field(
        default=True, description="also tune from scratch, for speedup and gates"
    )
    gates: Gates = Field(default_factory=Gates)
    training: TrainingParams = Field(
        default_factory=TrainingParams,
        description="TrainingConfig overrides (steps: use step_budget)",
    )
    auto_campaign: bool = Field(
        default=True, description="start a campaign when a version is registered"
    )

    @field_validator("methods")
    @classmethod
    def _methods(cls, value: list[str]) -> list[str]:
        return _unique_methods(value)


class PolicyOut(BaseModel):
    model: str
    methods: list[str]
    step_budget: int
    few_shot: int | None
    fresh_baseline: bool
    gates: Gates
    training: dict[str, Any]
    auto_campaign: bool
    is_default: bool = Field(description="no policy was set: these are the defaults")
    updated_at: dt.datetime | None


class CampaignCreate(_Strict):
    """Recycle a model's adapters from one version to another; unset fields follow the policy."""

    model: str
    from_version: int = Field(ge=1, le=INT_MAX)
    to_version: int = Field(ge=1, le=INT_MAX)
    adapter_ids: list[str] | None = Field(
        default=None, description="only these adapters (default: all READY)"
    )
    methods: list[RecycleMethodName] | None = Field(default=None, min_length=1)
    step_budget: int | None = Field(default=None, ge=1, le=10_000_000)
    few_shot: int | None = Field(default=None, ge=1, le=INT_MAX)
    fresh_baseline: bool | None = None
    gates: Gates | None = None
    training: TrainingParams | None = None

    @field_validator("methods")
    @classmethod
    def _methods(cls, value: list[str] | None) -> list[str] | None:
        return _unique_methods(value) if value is not None else None


class CampaignOut(BaseModel):
    id: str
    model: str
    from_version: int
    to_version: int
    from_version_id: int
    to_version_id: int
    trigger: str
    status: CampaignStatus
    policy: dict[str, Any] = Field(description="the policy snapshot the campaign runs under")
    summary: dict[str, Any] = Field(
        description="per adapter: compatibility, each method's test score and steps_to_target, "
        "speedup, interpolation barrier, promoted adapter"
    )
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None


class CampaignDetail(CampaignOut):
    jobs: list[JobOut]
