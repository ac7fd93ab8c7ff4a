"""Request and response bodies of the API-key endpoints."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, ConfigDict, Field

from app.db import Role


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128)
    role: Role


class KeyOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    prefix: str
    role: Role
    created_at: dt.datetime
    revoked_at: dt.datetime | None
    last_used_at: dt.datetime | None


class KeyCreated(KeyOut):
    secret: str = Field(description="the API key itself; shown only in this response")


class PrincipalOut(BaseModel):
    key_id: int | None
    name: str
    role: Role
