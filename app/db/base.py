"""Declarative base, shared column types and enums of the registry schema."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase

# Stable constraint names: Alembic batch mode on SQLite and later migrations refer to them.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_N_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> dt.datetime:
    """The current time, timezone-aware UTC."""
    return dt.datetime.now(dt.UTC)


def new_uuid() -> str:
    """A new random id for resources exposed by uuid (adapters, jobs, reports, campaigns)."""
    return str(uuid.uuid4())


class UTCDateTime(sa.TypeDecorator[dt.datetime]):
    """Timezone-aware UTC timestamps on every backend (SQLite stores them naive)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime refused: store timezone-aware UTC timestamps")
        value = value.astimezone(dt.UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)


JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
"""JSON documents; JSONB on PostgreSQL (comparable, indexable)."""

SHA256 = sa.String(64)

INT_MAX = 2**31 - 1
"""Largest INTEGER column value (ids, version numbers): the API refuses bigger ones (422)."""
SEED_MAX = 2**32 - 1
"""Largest random seed the training stack accepts."""


class Base(DeclarativeBase):
    """Declarative base of every registry table (one metadata for Alembic)."""

    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: dict[Any, Any] = {
        dt.datetime: UTCDateTime(),
        dict[str, Any]: JSONType,
        list[Any]: JSONType,
    }


def enum_column(enum_class: type[enum.Enum], name: str) -> sa.Enum:
    """A portable enum column: VARCHAR plus a named CHECK constraint, storing the values."""
    return sa.Enum(
        enum_class,
        name=name,
        native_enum=False,
        create_constraint=True,
        length=32,
        values_callable=lambda members: [member.value for member in members],
        validate_strings=True,
    )


class VersionStatus(enum.StrEnum):
    PENDING = "PENDING"
    READY = "READY"
    FAILED = "FAILED"


class AdapterStatus(enum.StrEnum):
    PENDING = "PENDING"
    READY = "READY"
    FAILED = "FAILED"


class TaskKind(enum.StrEnum):
    CLASSIFICATION = "classification"
    GENERATION = "generation"


class JobKind(enum.StrEnum):
    TRAIN = "train"
    COMPATIBILITY = "compatibility"
    RECYCLE = "recycle"
    INTERPOLATION = "interpolation"
    SIMILARITY = "similarity"


class JobQueue(enum.StrEnum):
    GPU = "gpu"
    CPU = "cpu"


class JobStatus(enum.StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


class CampaignStatus(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    PARTIAL = "PARTIAL"
    """Finished; some adapters were recycled, others failed."""
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self not in (CampaignStatus.PENDING, CampaignStatus.RUNNING)


class Role(enum.StrEnum):
    READER = "reader"
    PLATFORM = "platform"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _ROLE_RANK[self]

    def allows(self, required: Role) -> bool:
        """True when this role is at least as strong as ``required``."""
        return self.rank >= required.rank


_ROLE_RANK = {Role.READER: 1, Role.PLATFORM: 2, Role.ADMIN: 3}


class DeliveryStatus(enum.StrEnum):
    PENDING = "PENDING"
    DELIVERED = "DELIVERED"
    FAILED = "FAILED"
