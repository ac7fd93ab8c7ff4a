"""SQL of adapters and adapter aliases."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session, joinedload, selectinload
from sqlalchemy.orm.interfaces import LoaderOption

from app.db import Adapter, AdapterAlias, AdapterStatus, ModelVersion
from app.db.upsert import upsert
from app.pagination import Pagination


@dataclass(frozen=True)
class AdapterQuery:
    """Resolved filters of an adapter listing (ids, not names)."""

    model_id: int | None = None
    model_version_id: int | None = None
    task_id: int | None = None
    status: AdapterStatus | None = None
    alias: str | None = None
    recycled_from_id: str | None = None
    job_id: str | None = None
    method: str | None = None


class AdapterRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    @staticmethod
    def _loads() -> tuple[LoaderOption, ...]:
        return (
            joinedload(Adapter.task),
            joinedload(Adapter.model_version).joinedload(ModelVersion.model),
            selectinload(Adapter.aliases),
        )

    def get(self, adapter_id: str, *, include_deleted: bool = False) -> Adapter | None:
        query = sa.select(Adapter).options(*self._loads()).where(Adapter.id == adapter_id)
        if not include_deleted:
            query = query.where(Adapter.deleted_at.is_(None))
        return self.session.scalar(query)

    def add(self, adapter: Adapter) -> Adapter:
        self.session.add(adapter)
        self.session.flush()
        return adapter

    def list(self, filters: AdapterQuery, page: Pagination) -> tuple[list[Adapter], int]:
        query = sa.select(Adapter).where(Adapter.deleted_at.is_(None))
        if filters.model_id is not None:
            query = query.join(ModelVersion, ModelVersion.id == Adapter.model_version_id).where(
                ModelVersion.model_id == filters.model_id
            )
        if filters.model_version_id is not None:
            query = query.where(Adapter.model_version_id == filters.model_version_id)
        if filters.task_id is not None:
            query = query.where(Adapter.task_id == filters.task_id)
        if filters.status is not None:
            query = query.where(Adapter.status == filters.status)
        if filters.recycled_from_id is not None:
            query = query.where(Adapter.recycled_from_id == filters.recycled_from_id)
        if filters.job_id is not None:
            query = query.where(Adapter.job_id == filters.job_id)
        if filters.method is not None:
            query = query.where(Adapter.method == filters.method)
        if filters.alias is not None:
            query = query.where(
                sa.exists().where(
                    AdapterAlias.adapter_id == Adapter.id, AdapterAlias.alias == filters.alias
                )
            )
        total = self.session.scalar(sa.select(sa.func.count()).select_from(query.subquery())) or 0
        rows = (
            self.session.scalars(
                query.options(*self._loads())
                .order_by(Adapter.created_at.desc(), Adapter.id)
                .limit(page.limit)
                .offset(page.offset)
            )
            .unique()
            .all()
        )
        return list(rows), total

    def set_alias(self, adapter: Adapter, alias: str, now: dt.datetime) -> None:
        """Point ``alias`` of (model version, task) at ``adapter``, moving it if needed (upsert)."""
        upsert(
            self.session,
            AdapterAlias.__table__,  # type: ignore[arg-type]
            {
                "model_version_id": adapter.model_version_id,
                "task_id": adapter.task_id,
                "alias": alias,
                "adapter_id": adapter.id,
                "updated_at": now,
            },
            conflict_columns=("model_version_id", "task_id", "alias"),
            update_columns=("adapter_id", "updated_at"),
        )

    def remove_aliases(self, adapter_id: str, aliases: Iterable[str] | None = None) -> None:
        """Drop the adapter's aliases (all of them when ``aliases`` is None)."""
        statement = sa.delete(AdapterAlias).where(AdapterAlias.adapter_id == adapter_id)
        if aliases is not None:
            statement = statement.where(AdapterAlias.alias.in_(list(aliases)))
        self.session.execute(statement)

    def refresh_aliases(self, adapter: Adapter) -> None:
        self.session.refresh(adapter, ["aliases"])
