"""Request and response bodies of ``/v1/tasks``."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.db import TaskKind

TASK_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
Labels = Annotated[list[Annotated[str, Field(min_length=1, max_length=200)]], Field(min_length=2)]


class SplitOut(BaseModel):
    file: str
    uri: str
    sha256: str
    examples: int


class TaskOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    kind: TaskKind
    labels: list[str] | None
    metric: str
    description: str | None
    artifact_uri: str
    fingerprint: str
    splits: dict[str, SplitOut]
    created_at: dt.datetime
