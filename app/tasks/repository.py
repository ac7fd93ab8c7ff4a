"""SQL of tasks."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.db import Task
from app.pagination import Pagination


class TaskRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, name: str, *, include_deleted: bool = False) -> Task | None:
        query = sa.select(Task).where(Task.name == name)
        if not include_deleted:
            query = query.where(Task.deleted_at.is_(None))
        return self.session.scalar(query)

    def get_by_id(self, task_id: int) -> Task | None:
        return self.session.get(Task, task_id)

    def add(self, task: Task) -> Task:
        """Insert a task; raises IntegrityError (transaction intact) when the name is taken."""
        with self.session.begin_nested():
            self.session.add(task)
            self.session.flush()
        return task

    def list(self, page: Pagination) -> tuple[list[Task], int]:
        query = sa.select(Task).where(Task.deleted_at.is_(None))
        total = self.session.scalar(sa.select(sa.func.count()).select_from(query.subquery())) or 0
        rows = self.session.scalars(
            query.order_by(Task.name).limit(page.limit).offset(page.offset)
        ).all()
        return list(rows), total
