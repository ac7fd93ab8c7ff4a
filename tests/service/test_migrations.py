"""The schema comes only from Alembic, and it matches the ORM metadata on both backends."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from app.db import Base
from app.db.migrate import alembic_config, current_revision, upgrade_to_head
from app.db.session import create_db_engine

REPO = Path(__file__).resolve().parents[2]


def _diff(url: str) -> list[object]:
    engine = create_db_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            return list(compare_metadata(context, Base.metadata))
    finally:
        engine.dispose()


def test_sqlite_head_matches_metadata(tmp_path):
    url = f"sqlite:///{tmp_path / 'parity.sqlite'}"
    upgrade_to_head(url)
    assert _diff(url) == []
    assert current_revision(url) == "0001"
    upgrade_to_head(url)  # idempotent


@pytest.mark.postgres
def test_postgresql_head_matches_metadata(postgres_url):
    assert _diff(postgres_url) == []
    assert current_revision(postgres_url) == "0001"


def test_downgrade_and_upgrade_again(tmp_path):
    url = f"sqlite:///{tmp_path / 'cycle.sqlite'}"
    upgrade_to_head(url)
    command.downgrade(alembic_config(url), "base")
    engine = create_db_engine(url)
    try:
        assert set(sa.inspect(engine).get_table_names()) <= {"alembic_version"}
    finally:
        engine.dispose()
    upgrade_to_head(url)
    assert _diff(url) == []


def test_sqlite_connections_enforce_foreign_keys_and_use_wal(tmp_path):
    url = f"sqlite:///{tmp_path / 'pragmas.sqlite'}"
    upgrade_to_head(url)
    engine = create_db_engine(url)
    try:
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            with pytest.raises(sa.exc.IntegrityError):
                connection.exec_driver_sql(
                    "INSERT INTO model_aliases (model_id, alias, model_version_id, updated_at) "
                    "VALUES (42, 'x', 42, '2024-01-01')"
                )
    finally:
        engine.dispose()


def test_app_code_never_creates_the_schema_itself():
    offenders = [
        str(path.relative_to(REPO))
        for path in (REPO / "app").rglob("*.py")
        if re.search(r"\bcreate_all\s*\(", path.read_text())
    ]
    assert offenders == []


def test_embedded_start_up_migrates(tmp_path):
    import warnings

    from app.main import create_app
    from app.settings import Settings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    settings = Settings(data_dir=tmp_path / "embedded", auth_required=False)
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/models", json={"name": "m"}).status_code == 201
    assert current_revision(settings.database_url) == "0001"
