"""Engines, sessions and the unit of work: one owner commits, hooks run after commit/rollback.

The request dependency (``app.deps.get_session``) and ``session_scope()`` (workers, command
line) are the only places that commit or roll back. Services register side effects that must
wait for the outcome of the transaction with :func:`call_after_commit` (enqueue a job, send a
webhook) or :func:`call_after_rollback` (delete an artifact written for a row that never
landed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

logger = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MS = 30_000
_AFTER_COMMIT_KEY = "after_commit"
_AFTER_ROLLBACK_KEY = "after_rollback"

SessionFactory = sessionmaker[Session]


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # Let SQLAlchemy emit BEGIN itself (see _sqlite_on_begin): the sqlite3 driver's legacy
    # transaction control breaks SAVEPOINT, which the version-number retry relies on.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _sqlite_on_begin(connection: sa.Connection) -> None:
    if connection.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
        return  # a read session: no transaction, no lock
    # IMMEDIATE takes the write lock up front. A deferred transaction that reads and then writes
    # fails at once with "database is locked" when another process (the embedded worker writing
    # progress) committed in between; busy_timeout cannot help there. Embedded mode trades
    # concurrency for this; production runs on PostgreSQL.
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def is_sqlite_url(database_url: str | sa.URL) -> bool:
    return sa.make_url(database_url).get_backend_name() == "sqlite"


def create_db_engine(
    database_url: str | sa.URL, *, echo: bool = False, pool_size: int = 10, max_overflow: int = 20
) -> Engine:
    """An engine set up for its backend: SQLite (WAL, foreign keys, busy timeout) or a server."""
    url = sa.make_url(database_url)
    if url.get_backend_name() == "sqlite":
        if url.database and url.database != ":memory:":
            Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(
            url,
            echo=echo,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        )
        event.listen(engine, "connect", _sqlite_on_connect)
        event.listen(engine, "begin", _sqlite_on_begin)
        return engine
    return sa.create_engine(
        url, echo=echo, pool_pre_ping=True, pool_size=pool_size, max_overflow=max_overflow
    )


def create_session_factory(engine: Engine | sa.Connection) -> SessionFactory:
    """Sessions that keep loaded attributes after commit (responses are built from them)."""
    return sessionmaker(bind=engine, expire_on_commit=False)


@lru_cache(maxsize=1)
def default_session_factory() -> SessionFactory:
    """The process-wide session factory on ``Settings().database_url`` (workers, command line)."""
    from app.settings import get_settings

    return create_session_factory(create_db_engine(get_settings().database_url))


def call_after_commit(session: Session, callback: Callable[[], None]) -> None:
    """Run ``callback`` once the session's transaction has committed; dropped on rollback."""
    session.info.setdefault(_AFTER_COMMIT_KEY, []).append(callback)


def call_after_rollback(session: Session, callback: Callable[[], None]) -> None:
    """Run ``callback`` if the session's transaction rolls back (compensate outside effects)."""
    session.info.setdefault(_AFTER_ROLLBACK_KEY, []).append(callback)


def _run_callbacks(callbacks: list[Callable[[], None]], when: str) -> None:
    for callback in callbacks:
        try:
            callback()
        except Exception:  # one failing side effect must not hide the others
            logger.exception("%s callback %r failed", when, callback)


def commit_session(session: Session) -> None:
    """Commit, then run the after-commit callbacks (rollback callbacks are discarded)."""
    session.commit()
    session.info.pop(_AFTER_ROLLBACK_KEY, None)
    _run_callbacks(session.info.pop(_AFTER_COMMIT_KEY, []), "after-commit")


def rollback_session(session: Session) -> None:
    """Roll back, then run the after-rollback callbacks (commit callbacks are discarded)."""
    try:
        session.rollback()
    finally:
        session.info.pop(_AFTER_COMMIT_KEY, None)
        _run_callbacks(session.info.pop(_AFTER_ROLLBACK_KEY, []), "after-rollback")


def finish_transaction(session: Session, succeeded: bool) -> None:
    """Commit (or roll back when the work failed), run the callbacks, close the session."""
    try:
        if not succeeded:
            rollback_session(session)
            return
        try:
            commit_session(session)
        except BaseException:
            rollback_session(session)
            raise
    finally:
        session.close()


@contextmanager
def transaction(factory: SessionFactory) -> Iterator[Session]:
    """Open a session, commit on success, roll back on any error, always close."""
    session = factory()
    try:
        yield session
    except BaseException:
        finish_transaction(session, False)
        raise
    finish_transaction(session, True)


@contextmanager
def session_scope(factory: SessionFactory | None = None) -> Iterator[Session]:
    """The transaction owner for workers and the command line (commits on success)."""
    with transaction(factory or default_session_factory()) as session:
        yield session
