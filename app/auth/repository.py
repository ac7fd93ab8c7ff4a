"""SQL of API keys."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.db import ApiKey
from app.pagination import Pagination


class ApiKeyRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, key: ApiKey) -> ApiKey:
        self.session.add(key)
        self.session.flush()
        return key

    def get(self, key_id: int) -> ApiKey | None:
        return self.session.get(ApiKey, key_id)

    def get_by_prefix(self, prefix: str) -> ApiKey | None:
        return self.session.scalar(sa.select(ApiKey).where(ApiKey.prefix == prefix))

    def touch_last_used(self, key_id: int, now: dt.datetime, unless_after: dt.datetime) -> None:
        # SKIP LOCKED: when another transaction holds the row (a concurrent call recording the
        # same key, a revocation), this call's timestamp is not worth waiting for.
        due = (
            sa.select(ApiKey.id)
            .where(
                ApiKey.id == key_id,
                sa.or_(ApiKey.last_used_at.is_(None), ApiKey.last_used_at < unless_after),
            )
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
        self.session.execute(sa.update(ApiKey).where(ApiKey.id == due).values(last_used_at=now))

    def count_active_admins(self) -> int:
        return (
            self.session.scalar(
                sa.select(sa.func.count())
                .select_from(ApiKey)
                .where(ApiKey.role == "admin", ApiKey.revoked_at.is_(None))
            )
            or 0
        )

    def list(self, page: Pagination, *, include_revoked: bool) -> tuple[list[ApiKey], int]:
        query = sa.select(ApiKey)
        if not include_revoked:
            query = query.where(ApiKey.revoked_at.is_(None))
        total = self.session.scalar(sa.select(sa.func.count()).select_from(query.subquery())) or 0
        rows = self.session.scalars(
            query.order_by(ApiKey.id).limit(page.limit).offset(page.offset)
        ).all()
        return list(rows), total
