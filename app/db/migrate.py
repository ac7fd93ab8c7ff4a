"""Run the Alembic migrations from code: the app's embedded start-up and the tests."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

import migrations

MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent


def alembic_config(database_url: str) -> Config:
    """An Alembic config for ``migrations/`` and ``database_url`` (no alembic.ini needed)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # ConfigParser interpolates "%"; URLs may hold percent-encoded passwords.
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    config.attributes["configure_logging"] = False
    return config


def upgrade_to_head(database_url: str) -> None:
    """Bring the database schema to the newest revision (idempotent)."""
    command.upgrade(alembic_config(database_url), "head")


def current_revision(database_url: str) -> str | None:
    """The revision the database is at, or None for an empty database."""
    from alembic.runtime.migration import MigrationContext

    from app.db.session import create_db_engine

    engine = create_db_engine(database_url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()
