"""Readable dependency aliases: ``SessionDep``, ``SettingsDep``, ``StoreDep``.

``get_session`` is the request's transaction owner: it commits when the path operation
returns and rolls back when it raises, before the response is sent (``scope="function"``), so
a failed commit is reported to the caller instead of being lost after a 2xx.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from app.db.session import finish_transaction
from app.settings import Settings
from app.storage import ArtifactStore


# The dependencies that only read app state are async: FastAPI runs a sync dependency on a
# worker thread, a hop that costs more than the lookup.
async def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_store(request: Request) -> ArtifactStore:
    store: ArtifactStore = request.app.state.artifact_store
    return store


READ_METHODS = frozenset({"GET", "HEAD"})


async def get_session(request: Request) -> AsyncIterator[Session]:
    """The request's session: opened on the event loop (no I/O until its first statement) and
    finished (commit or rollback, after-commit callbacks, close) in one worker-thread call.

    GET and HEAD requests get a session in autocommit mode (``read_session_factory``): no
    BEGIN/COMMIT round trips and, on SQLite, no write lock for a read. PostgreSQL's default READ
    COMMITTED gives every statement its own snapshot either way.
    """
    state = request.app.state
    reading = request.method in READ_METHODS
    session = (state.read_session_factory if reading else state.session_factory)()
    try:
        yield session
    except BaseException:
        await run_in_threadpool(finish_transaction, session, False)
        raise
    await run_in_threadpool(finish_transaction, session, True)


SessionDep = Annotated[Session, Depends(get_session, scope="function")]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
StoreDep = Annotated[ArtifactStore, Depends(get_store)]
