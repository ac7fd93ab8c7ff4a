"""The versioned report document (DESIGN §7).

A report holds everything needed to reproduce a run: what went in (fingerprints of every model,
adapter and dataset), how it ran (method, hyperparameters, seed, library versions, hardware),
and what came out (metrics of DESIGN §6, curves as arrays, cost).
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import uuid
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = "1.0"

ReportKind = Literal["train", "compatibility", "recycle", "interpolation", "similarity", "upgrade"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Fingerprint(_Strict):
    """sha256 of one input: a model, an adapter or a dataset split."""

    role: str
    sha256: str
    path: str | None = None
    files: dict[str, str] = Field(default_factory=dict)


class Hardware(_Strict):
    device: str
    device_name: str
    cpu_count: int
    platform: str = Field(default_factory=platform.platform)


class Cost(_Strict):
    wall_seconds: float = 0.0
    device_seconds: float = 0.0
    tokens: int = 0
    peak_memory_bytes: int = 0


class TaskScore(_Strict):
    """Task metric on one split: accuracy and macro-F1 (classification) or exact match."""

    split: str
    n: int
    loss: float
    accuracy: float | None = None
    macro_f1: float | None = None
    exact_match: float | None = None
    floor: float | None = None

    @property
    def primary(self) -> float:
        value = self.accuracy if self.accuracy is not None else self.exact_match
        return float(value if value is not None else -self.loss)


class EvalPoint(_Strict):
    step: int
    tokens: int = 0
    metric: float
    loss: float


class TrainingCurve(_Strict):
    metric_name: str
    eval_every: int
    points: list[EvalPoint] = Field(default_factory=list)
    train_loss: list[tuple[int, float]] = Field(default_factory=list)
    best_step: int | None = None
    best_metric: float | None = None


class CompatibilityMetrics(_Strict):
    metric_name: str
    split: str
    source: float
    direct: float
    retention: float
    negative_flip_rate: float
    agreement: float
    floor: float
    recovery: float | None = None
    fresh: float | None = None


class InterpolationMetrics(_Strict):
    mode: Literal["model", "adapter"]
    split: str
    alphas: list[float]
    losses: list[float]
    metrics: list[float]
    metric_name: str
    loss_barrier: float
    accuracy_barrier: float
    connected: bool


class SimilarityMetrics(_Strict):
    matrix: list[list[float]]
    mean: float
    chance_level: float
    n_probes: int


class ConvergenceMetrics(_Strict):
    target: float
    target_source: Literal["fresh", "source", "given"]
    steps_to_target: int | None
    fresh_steps_to_target: int | None = None
    speedup: float | None = None


class WeightDistance(_Strict):
    relative_l2: float
    cosine: float
    per_module: dict[str, float] = Field(default_factory=dict)


class Metrics(_Strict):
    test: TaskScore | None = None
    dev: TaskScore | None = None
    compatibility: CompatibilityMetrics | None = None
    interpolation: InterpolationMetrics | None = None
    similarity: SimilarityMetrics | None = None
    convergence: ConvergenceMetrics | None = None
    weight_distance: WeightDistance | None = None
    extra: dict[str, float] = Field(default_factory=dict)


class Report(_Strict):
    """One run's results, versioned by ``schema_version``."""

    schema_version: str = SCHEMA_VERSION
    report_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    kind: ReportKind
    created_at: str = Field(
        default_factory=lambda: _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    )
    job_id: str | None = None
    inputs: dict[str, str] = Field(default_factory=dict)
    method: str | None = None
    peft_type: str | None = None
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    seed: int | None = None
    fingerprints: list[Fingerprint] = Field(default_factory=list)
    library_versions: dict[str, str] = Field(default_factory=dict)
    hardware: Hardware | None = None
    metrics: Metrics = Field(default_factory=Metrics)
    curve: TrainingCurve | None = None
    cost: Cost = Field(default_factory=Cost)
    output: dict[str, Any] = Field(default_factory=dict)

    def write(self, path: str | Path) -> Path:
        """Write the report as indented JSON and return its path."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.model_dump_json(indent=2))
        return target

    @classmethod
    def read(cls, path: str | Path) -> Report:
        """Read and validate a report file."""
        return cls.model_validate(json.loads(Path(path).read_text()))
