"""SQL of policies and campaigns, and the campaign lock that serialises its state machine."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session, joinedload

from app.db import (
    Adapter,
    AdapterStatus,
    Campaign,
    CampaignStatus,
    ModelVersion,
    Policy,
    Report,
)
from app.pagination import Pagination


@dataclass(frozen=True)
class CampaignQuery:
    model_id: int | None = None
    status: CampaignStatus | None = None


class CampaignRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    # ---------------------------------------------------------------- policies

    def get_policy(self, model_id: int) -> Policy | None:
        return self.session.scalar(sa.select(Policy).where(Policy.model_id == model_id))

    def add_policy(self, policy: Policy) -> Policy:
        self.session.add(policy)
        self.session.flush()
        return policy

    # ---------------------------------------------------------------- campaigns

    def add(self, campaign: Campaign) -> Campaign:
        self.session.add(campaign)
        self.session.flush()
        return campaign

    def get(self, campaign_id: str) -> Campaign | None:
        return self.session.get(Campaign, campaign_id)

    def lock(self, campaign_id: str) -> Campaign | None:
        """The campaign row, locked until the transaction ends (one state-machine step at a time).

        PostgreSQL: ``SELECT … FOR UPDATE``. SQLite has no row locks: a no-op ``UPDATE`` takes
        the database write lock first (waiting for it rather than failing on a stale snapshot).
        """
        if self.session.get_bind().dialect.name == "sqlite":
            self.session.execute(
                sa.update(Campaign)
                .where(Campaign.id == campaign_id)
                .values(status=Campaign.status)
                .execution_options(synchronize_session=False)
            )
        return self.session.scalar(
            sa.select(Campaign)
            .where(Campaign.id == campaign_id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )

    def page(self, filters: CampaignQuery, page: Pagination) -> tuple[list[Campaign], int]:
        query = sa.select(Campaign)
        if filters.model_id is not None:
            query = query.where(Campaign.model_id == filters.model_id)
        if filters.status is not None:
            query = query.where(Campaign.status == filters.status)
        total = self.session.scalar(sa.select(sa.func.count()).select_from(query.subquery())) or 0
        rows = self.session.scalars(
            query.order_by(Campaign.created_at.desc(), Campaign.id)
            .limit(page.limit)
            .offset(page.offset)
        ).all()
        return list(rows), total

    def running_ids(self, limit: int = 200) -> list[str]:
        return list(
            self.session.scalars(
                sa.select(Campaign.id)
                .where(Campaign.status.in_([CampaignStatus.PENDING, CampaignStatus.RUNNING]))
                .order_by(Campaign.created_at)
                .limit(limit)
            ).all()
        )

    def versions(self, *version_ids: int) -> dict[int, ModelVersion]:
        rows = self.session.scalars(
            sa.select(ModelVersion)
            .options(joinedload(ModelVersion.model))
            .where(ModelVersion.id.in_(version_ids))
        ).all()
        return {row.id: row for row in rows}

    # ---------------------------------------------------------------- adapters and reports

    def ready_adapters(self, model_version_id: int) -> list[Adapter]:
        """Live READY adapters of a version, oldest first."""
        return list(
            self.session.scalars(
                sa.select(Adapter)
                .options(joinedload(Adapter.task))
                .where(
                    Adapter.model_version_id == model_version_id,
                    Adapter.status == AdapterStatus.READY,
                    Adapter.deleted_at.is_(None),
                )
                .order_by(Adapter.created_at, Adapter.id)
            ).all()
        )

    def adapters(self, adapter_ids: list[str]) -> dict[str, Adapter]:
        if not adapter_ids:
            return {}
        rows = self.session.scalars(
            sa.select(Adapter).options(joinedload(Adapter.task)).where(Adapter.id.in_(adapter_ids))
        ).all()
        return {row.id: row for row in rows}

    def find_produced_adapter(
        self, *, recycled_from_id: str, model_version_id: int, method: str, job_id: str
    ) -> Adapter | None:
        return self.session.scalar(
            sa.select(Adapter).where(
                Adapter.recycled_from_id == recycled_from_id,
                Adapter.model_version_id == model_version_id,
                Adapter.method == method,
                Adapter.job_id == job_id,
                Adapter.deleted_at.is_(None),
            )
        )

    def reports(self, report_ids: list[str]) -> dict[str, Report]:
        if not report_ids:
            return {}
        rows = self.session.scalars(sa.select(Report).where(Report.id.in_(report_ids))).all()
        return {row.id: row for row in rows}
