"""Portable INSERT … ON CONFLICT DO UPDATE for the two backends we run on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session


def upsert(
    session: Session,
    table: sa.Table,
    values: Mapping[str, Any],
    *,
    conflict_columns: Sequence[str],
    update_columns: Sequence[str],
) -> None:
    """Insert ``values`` or, on a conflict of ``conflict_columns``, update ``update_columns``."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        statement: Any = postgresql.insert(table).values(**values)
    elif dialect == "sqlite":
        statement = sqlite.insert(table).values(**values)
    else:  # pragma: no cover - only SQLite and PostgreSQL are supported
        raise NotImplementedError(f"upsert is not implemented for {dialect}")
    statement = statement.on_conflict_do_update(
        index_elements=list(conflict_columns),
        set_={column: statement.excluded[column] for column in update_columns},
    )
    session.execute(statement)
