"""Request and response bodies of ``/v1/jobs`` (one typed parameter model per job kind)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.db import Job, JobKind, JobQueue, JobStatus
from app.db.base import INT_MAX, SEED_MAX
from app.models.schemas import Alias

RecycleMethodName = Literal["direct", "init", "distill", "init_distill", "fresh"]
Split = Literal["dev", "test"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TrainingParams(_Strict):
    """Overrides of ``recycling_core.training.TrainingConfig``; omitted fields keep its defaults."""

    steps: int | None = Field(default=None, ge=1, le=10_000_000)
    batch_size: int | None = Field(default=None, ge=1, le=65_536)
    learning_rate: float | None = Field(default=None, gt=0)
    weight_decay: float | None = Field(default=None, ge=0)
    warmup_ratio: float | None = Field(default=None, ge=0, lt=1)
    schedule: Literal["linear", "cosine", "constant"] | None = None
    grad_accumulation: int | None = Field(default=None, ge=1, le=INT_MAX)
    eval_every: int | None = Field(default=None, ge=1, le=INT_MAX)
    eval_batch_size: int | None = Field(default=None, ge=1, le=INT_MAX)
    max_length: int | None = Field(default=None, ge=8, le=131_072)
    max_grad_norm: float | None = Field(default=None, ge=0)
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX)
    distill_alpha: float | None = Field(default=None, ge=0, le=1)
    distill_temperature: float | None = Field(default=None, gt=0)
    hidden_mse_weight: float | None = Field(default=None, ge=0)
    checkpoint_every: int | None = Field(default=None, ge=1, le=INT_MAX)
    device: Literal["auto", "cpu", "cuda"] | None = None

    def overrides(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class AdapterParams(_Strict):
    """A fresh adapter's shape (``recycling_core.adaptation.AdapterOptions``)."""

    peft: Literal["lora", "ia3", "prompt", "full"] = "lora"
    lora_rank: int = Field(default=8, ge=1, le=4096)
    lora_alpha: int = Field(default=16, ge=1, le=INT_MAX)
    lora_dropout: float = Field(default=0.0, ge=0, lt=1)
    target_modules: list[str] | None = None
    num_virtual_tokens: int = Field(default=8, ge=1, le=4096)


class TrainJobParams(_Strict):
    """Tune a fresh adapter on a model version for a task."""

    model_version_id: int | None = Field(
        default=None, ge=1, le=INT_MAX, description="or model + version"
    )
    model: str | None = None
    version: int | None = Field(default=None, ge=1, le=INT_MAX)
    task_id: int | None = Field(default=None, ge=1, le=INT_MAX, description="or task (name)")
    task: str | None = None
    adapter: AdapterParams = Field(default_factory=AdapterParams)
    training: TrainingParams = Field(default_factory=TrainingParams)
    few_shot: int | None = Field(
        default=None, ge=1, le=INT_MAX, description="labelled examples per class"
    )
    name: str | None = Field(
        default=None, max_length=128, description="name of the produced adapter"
    )
    aliases: list[Alias] = Field(
        default_factory=list, description="aliases of the produced adapter"
    )


class CompatibilityJobParams(_Strict):
    """Measure how an adapter does on another (upgraded) model version without training."""

    adapter_id: str
    to_version_id: int = Field(ge=1, le=INT_MAX)
    split: Split = "test"
    fresh_score: float | None = Field(default=None, description="fresh baseline score (recovery)")
    seed: int = Field(default=0, ge=0, le=SEED_MAX)


class RecycleJobParams(_Strict):
    """Recycle an adapter for another (upgraded) model version with one method."""

    adapter_id: str
    to_version_id: int = Field(ge=1, le=INT_MAX)
    method: RecycleMethodName
    training: TrainingParams = Field(default_factory=TrainingParams)
    few_shot: int | None = Field(default=None, ge=1, le=INT_MAX)
    target: float | None = Field(default=None, description="dev metric of convergence")
    name: str | None = Field(default=None, max_length=128)
    aliases: list[Alias] = Field(default_factory=list)


class InterpolationJobParams(_Strict):
    """Linear interpolation between two adapted models of one task (DESIGN §6)."""

    old_adapter_id: str
    new_adapter_id: str
    mode: Literal["model", "adapter"] = "model"
    points: int = Field(default=11, ge=2, le=101)
    split: Split = "test"
    seed: int = Field(default=0, ge=0, le=SEED_MAX)


class SimilarityJobParams(_Strict):
    """Attention-head similarity of two adapted models of one task."""

    old_adapter_id: str
    new_adapter_id: str
    probes: int = Field(default=32, ge=1, le=4096)
    seed: int = Field(default=0, ge=0, le=SEED_MAX)


class _JobCreate(_Strict):
    max_attempts: int | None = Field(
        default=None,
        ge=1,
        le=20,
        description="runs allowed (retries and lost workers); default from settings",
    )


class TrainJobCreate(_JobCreate):
    kind: Literal["train"]
    params: TrainJobParams


class CompatibilityJobCreate(_JobCreate):
    kind: Literal["compatibility"]
    params: CompatibilityJobParams


class RecycleJobCreate(_JobCreate):
    kind: Literal["recycle"]
    params: RecycleJobParams


class InterpolationJobCreate(_JobCreate):
    kind: Literal["interpolation"]
    params: InterpolationJobParams


class SimilarityJobCreate(_JobCreate):
    kind: Literal["similarity"]
    params: SimilarityJobParams


JobCreate = Annotated[
    TrainJobCreate
    | CompatibilityJobCreate
    | RecycleJobCreate
    | InterpolationJobCreate
    | SimilarityJobCreate,
    Field(discriminator="kind"),
]

AnyJobParams = (
    TrainJobParams
    | CompatibilityJobParams
    | RecycleJobParams
    | InterpolationJobParams
    | SimilarityJobParams
)


class TrainAdapterRequest(TrainJobParams):
    """``POST /v1/adapters/train``: the parameters of a train job, and its attempt cap."""

    max_attempts: int | None = Field(default=None, ge=1, le=20)


class JobOut(BaseModel):
    id: str
    kind: JobKind
    queue: JobQueue
    status: JobStatus
    params: dict[str, Any]
    campaign_id: str | None
    campaign_key: str | None
    progress: dict[str, Any] = Field(
        description="phase, step, total, metrics, eta_seconds, eval_points, updated_at"
    )
    attempts: int
    max_attempts: int
    worker: str | None
    cancel_requested: bool
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    heartbeat_at: dt.datetime | None
    cost: dict[str, Any]
    error_code: str | None
    error_message: str | None
    result_adapter_id: str | None
    result_report_id: str | None

    @model_validator(mode="before")
    @classmethod
    def _from_orm(cls, value: Any) -> Any:
        if isinstance(value, Job):
            return {name: getattr(value, name) for name in cls.model_fields}
        return value
