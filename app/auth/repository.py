"""SQL of API keys."""

from __future__ import annotations

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
