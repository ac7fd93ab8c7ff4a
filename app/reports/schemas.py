"""Response bodies of ``/v1/reports``."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict


class ReportSummary(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    job_id: str | None
    kind: str
    schema_version: str
    created_at: dt.datetime


class ReportOut(ReportSummary):
    document: dict[str, Any]
