"""API keys: only the sha256 of each secret is stored."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import SHA256, Base, Role, enum_column, utcnow


class ApiKey(Base):
    """A bearer credential with a role; the secret itself is shown once and never stored."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(128))
    prefix: Mapped[str] = mapped_column(sa.String(16), unique=True)
    secret_hash: Mapped[str] = mapped_column(SHA256, unique=True)
    role: Mapped[Role] = mapped_column(enum_column(Role, "api_key_role"))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[dt.datetime | None]
    last_used_at: Mapped[dt.datetime | None]
