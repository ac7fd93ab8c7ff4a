"""Alembic environment: one metadata (app.db), URL from the config or from Settings."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from app.db import Base
from app.db.session import create_db_engine, is_sqlite_url

config = context.config
target_metadata = Base.metadata

if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _database_url() -> str:
    passed = context.get_x_argument(as_dictionary=True).get("database_url")
    if passed:
        return passed
    configured = config.get_main_option("sqlalchemy.url")
    if configured:
        return configured
    from app.settings import Settings

    return Settings().database_url


def _configure(connection: Connection | None = None, url: str | None = None) -> None:
    sqlite = is_sqlite_url(url or _database_url())
    context.configure(
        connection=connection,
        url=url,
        target_metadata=target_metadata,
        render_as_batch=sqlite,  # SQLite cannot ALTER most things: recreate the table instead
        compare_type=True,
        literal_binds=connection is None,
    )


def run_migrations_offline() -> None:
    _configure(url=_database_url())
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    url = _database_url()
    engine = create_db_engine(url)
    try:
        with engine.connect() as connection:
            if is_sqlite_url(url):
                # Batch migrations drop and recreate tables; foreign keys are checked again by
                # the app's connections. The pragma only works outside a transaction.
                driver_connection = connection.connection.driver_connection
                assert driver_connection is not None
                driver_connection.execute("PRAGMA foreign_keys=OFF")
            _configure(connection=connection)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
